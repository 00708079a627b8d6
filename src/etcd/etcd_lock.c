/*
 * etcd_lock.c -- the mutex on etcd: the key-per-waiter recipe behind
 * dlock_mutex_lock / trylock / timedlock / unlock, with the engine's
 * decisions (engine.h) and the hold records of holds.c, as mutex.c drives
 * them for Redis.
 *
 * HOW IT WORKS (docs/etcd.md has the picture):
 *   1. The thread takes the client's gate of the name (etcd_gate.c): one
 *      thread of a client in the recipe at a time; a re-entry is counted in
 *      the thread's record and sends nothing.
 *   2. One txn: IF the key <name>/<session lease> does not exist (create
 *      revision 0) THEN put it under the session lease, ELSE read it; both
 *      branches also read the name's keys sorted by create revision. The
 *      holder is the lowest create revision; an uncontended lock is this
 *      one request.
 *   3. Not first: a try-lock deletes its key and answers DLOCK_EBUSY. A
 *      waiting call watches only the key just ahead of its own (a DELETE
 *      from the revision of its look on), so one release wakes one waiter
 *      (no herd) and waiters are served in create-revision order (FIFO).
 *   4. AFTER EVERY WAKE-UP one txn checks that the call's own key still
 *      exists with its create revision -- its lease is alive, nobody
 *      deleted it -- and reads the keys again (etcd 3.4's own v3lock skips
 *      this check: the lock could go to a waiter whose lease had expired,
 *      etcd-io/etcd#11456). A key found gone starts the recipe again under
 *      a live session, within the wait's budget.
 *   5. When its key is first, the thread holds the lock. Its local deadline
 *      is the engine's: the send time of the session's last keepalive
 *      answered with TTL > 0, plus the TTL, minus the margin -- the server
 *      cannot expire the key earlier. A fixed lease (lease_ms > 0, whole
 *      seconds >= 2 s) gets a lease of its own, put on the key with one more
 *      txn (the key keeps its create revision); its deadline counts from
 *      that lease's grant.
 *   6. The unlock deletes the key IF its create revision is the hold's
 *      (a fixed hold revokes its lease), so any copy of it, however late,
 *      can never delete a later hold's key: etcd's revisions are what the
 *      Redis store's tombstones are. An unknown outcome stays pending in
 *      the record (the engine's rule); the next call sends it again.
 * A wait that ends without the lock (its budget, a cancel, an error)
 * deletes its key; if that delete gets no answer the key is stale and the
 * lease thread deletes it (etcd_gate.c).
 *
 * The fencing token of a hold is its key's create revision: monotonic
 * across the cluster (every write moves it), not consecutive.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd/etcd_int.h"

/* One acquire call. */
typedef struct acq {
  dlock_mutex *m;
  dlock_client *c;
  dlock__etcd *e;
  dlock__etcd_gate *g;
  uint64_t tid;
  int wd;
  int64_t lease_ms; /* the caller's fixed lease, or 0 */
  int prior;
  dlock__budget b;
  dlock__wait w;
  dlock__etcd_session s; /* the session the key was made under */
  dlock__sb key, from, to;
  int64_t rev;  /* our key's create revision (0: none yet) */
  int64_t hrev; /* the header revision of the last look */
  dlock__etcd_kvs kvs;
  int64_t sent, ttl; /* the hold's deadline: sent + ttl - margin */
  int64_t hold_lease;
  int waited;
  int code; /* the gateway's gRPC code of the last look's error */
  char what[300];
} acq;

static int etcd_lease_ok(long long lease_ms, const char *name) {
  int rc = dlock__check_lease(lease_ms, "lock", name);
  if (rc || lease_ms <= 0)
    return rc;
  if (lease_ms < 2000 || lease_ms % 1000)
    return dlock__fail(DLOCK_EINVAL,
                       "lock '%s': a fixed lease on etcd is whole seconds of "
                       "at least 2 s (etcd leases are; got %lld ms)",
                       name, lease_ms);
  return 0;
}

/* ---- the requests -------------------------------------------------------- */

/* The read of the name's keys, sorted by create revision (keys only). */
static void range_op(dlock__sb *b, const acq *a, int first_only) {
  dlock__sb_adds(b, "{\"request_range\":{\"key\":\"");
  dlock__etcd_b64(b, a->from.p, a->from.len);
  dlock__sb_adds(b, "\",\"range_end\":\"");
  dlock__etcd_b64(b, a->to.p, a->to.len);
  dlock__sb_adds(b, "\",\"sort_order\":\"ASCEND\",\"sort_target\":\"CREATE\","
                    "\"keys_only\":true");
  /* the create's own answer needs only the first key: ours, the common
   * case (held); else one more look reads them all (enqueue) */
  dlock__sb_adds(b, first_only ? ",\"limit\":\"1\"}}" : "}}");
}

/* "<client id>:<thread id>": the key's value, what status shows. */
static void holder_value(const acq *a, dlock__sb *b) {
  char field[DLOCK__FIELD_MAX];
  size_t fl = dlock__field(a->c, a->tid, field);
  dlock__etcd_b64(b, field, fl);
}

/* The txn of step 2 (create if absent; read) or 4 (check; read). */
static void txn_body(const acq *a, int check, dlock__sb *b) {
  dlock__sb_reset(b);
  dlock__sb_adds(b, "{\"compare\":[{\"key\":\"");
  dlock__etcd_b64(b, a->key.p, a->key.len);
  dlock__sb_adds(b, "\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
                    "\"create_revision\":");
  dlock__etcd_jint(b, check ? a->rev : 0);
  dlock__sb_adds(b, "}],\"success\":[");
  if (!check) {
    dlock__sb_adds(b, "{\"request_put\":{\"key\":\"");
    dlock__etcd_b64(b, a->key.p, a->key.len);
    dlock__sb_adds(b, "\",\"value\":\"");
    holder_value(a, b);
    dlock__sb_adds(b, "\",\"lease\":");
    dlock__etcd_jint(b, a->s.id);
    dlock__sb_adds(b, "}},");
  }
  range_op(b, a, !check);
  dlock__sb_adds(b, "],\"failure\":[");
  if (!check) {
    dlock__sb_adds(b, "{\"request_range\":{\"key\":\"");
    dlock__etcd_b64(b, a->key.p, a->key.len);
    dlock__sb_adds(b, "\"}},");
    range_op(b, a, 0);
  }
  dlock__sb_adds(b, "]}");
}

/* The range of response i of a txn answer. */
static json_object *txn_range(json_object *ans, size_t i) {
  json_object *rs = dlock__etcd_get(ans, "responses");
  json_object *x = rs && json_object_is_type(rs, json_type_array) &&
                           json_object_array_length(rs) > i
                       ? json_object_array_get_idx(rs, i)
                       : NULL;
  return dlock__etcd_get(x, "response_range");
}

/* Sends the txn of step 2 (check 0) or 4 (check 1) and reads its answer:
 * 1 our key exists (a->rev, a->hrev, a->kvs set), 0 it does not (check),
 * or a code. */
static int look(acq *a, int check) {
  dlock__sb b;
  dlock__sb_init(&b);
  txn_body(a, check, &b);
  dlock__etcd_res res = {0};
  memset(&res, 0, sizeof res);
  int rc =
      b.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
            : dlock__etcd_call(a->e, "/v3/kv/txn", &b, DLOCK__ETCD_RETRY, &res);
  dlock__sb_free(&b);
  a->code = res.code;
  if (rc)
    return rc;
  int ok = json_object_get_boolean(dlock__etcd_get(res.json, "succeeded"));
  a->hrev = dlock__etcd_rev(res.json);
  dlock__etcd_kvs_free(&a->kvs);
  if (check) {
    rc = ok ? dlock__etcd_kvs_parse(txn_range(res.json, 0), &a->from, &a->kvs)
            : 0;
    json_object_put(res.json);
    return rc < 0 ? rc : ok;
  }
  if (ok) {
    a->rev = a->hrev; /* the put made the key at the txn's revision */
  } else {
    dlock__etcd_kvs mine;
    rc = dlock__etcd_kvs_parse(txn_range(res.json, 0), NULL, &mine);
    if (rc == 0 && mine.n == 1)
      a->rev = mine.v[0].create; /* ours already (an earlier copy made it) */
    else if (rc == 0)
      rc = dlock__fail(DLOCK_EPROTO, "etcd txn: no key in either branch");
    dlock__etcd_kvs_free(&mine);
  }
  if (rc == 0)
    rc = dlock__etcd_kvs_parse(txn_range(res.json, 1), &a->from, &a->kvs);
  json_object_put(res.json);
  return rc < 0 ? rc : 1;
}

/* Our place among the name's keys: 0 first (the holder), > 0 behind
 * another, -1 our key is not among them. */
static int place(const acq *a) {
  for (size_t i = 0; i < a->kvs.n; i++)
    if (a->kvs.v[i].create == a->rev)
      return (int)i;
  return -1;
}

/* Deletes our key (the wait's end): compare on its revision. 0, or the
 * failure (the key is stale then: the lease thread deletes it). */
static int drop_key(acq *a) {
  dlock__sb b;
  dlock__sb_init(&b);
  int rc = dlock__etcd_delete_body(a->e, a->g, a->s.id, a->rev, &b);
  dlock__etcd_res res = {0};
  /* after the budget: the delete must not inherit the wait's deadline */
  dlock__call_deadline_reset();
  if (rc == 0)
    rc = dlock__etcd_call(a->e, "/v3/kv/txn", &b, DLOCK__ETCD_RETRY, &res);
  dlock__sb_free(&b);
  if (rc == 0)
    json_object_put(res.json);
  return rc;
}

/* ---- waiting --------------------------------------------------------------
 */

/* Watches key k (from the revision after our last look) until it is
 * deleted, until `until` (monotonic ms, -1 none), a cancel, the client
 * closing. Returns 0 (look again) or DLOCK_ENOMEM; the stream's failures
 * are not errors: the look after it says what is. */
static int watch_ahead(acq *a, const dlock__etcd_kv *k, int64_t until) {
  int rc = dlock__etcd_watch_wait(a->e, k->key, k->klen, NULL, 0, a->hrev + 1,
                                  1, until, &a->b);
  return rc < 0 ? rc : 0;
}

/* Why the wait must end now (the budget's verdict, worded), or 0. */
static int wait_over(const acq *a) {
  int rc = dlock__budget_over(&a->b, a->what);
  if (rc == DLOCK_ETIMEDOUT)
    return dlock__fail(DLOCK_ETIMEDOUT,
                       "lock '%s' still held elsewhere after "
                       "%lld ms",
                       a->m->name, a->b.wait_ms);
  return rc;
}

/* The session a->s is gone (a put under it answered "lease not found":
 * revoked, or expired while the lease thread had not seen it yet): the
 * next dlock__etcd_session_get grants a new one. */
static void session_gone(acq *a) {
  dlock__etcd *e = a->e;
  dlock__mu_lock(&e->mu);
  if (e->s.id == a->s.id) {
    dlock__etcd_gates_session_lost(e, e->s.gen, &e->lost);
    e->s.id = 0;
  }
  dlock__mu_unlock(&e->mu);
  dlock__etcd_lease_poke(e);
}

static int enqueue_once(acq *a);

/* Makes our key (again, under a live session) and looks: 1 held, 0 behind
 * another, or a code. */
static int enqueue(acq *a) {
  for (int i = 0;; i++) {
    int rc = enqueue_once(a);
    if (rc != DLOCK_EREDIS || a->code != 5 || i >= 2)
      return rc;
    session_gone(a);
  }
}

static int enqueue_once(acq *a) {
  int rc = dlock__etcd_session_get(a->e, &a->s);
  if (rc)
    return rc;
  dlock__etcd_key(a->e, &a->key, a->m->name, a->s.id);
  if (a->key.oom)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  a->rev = 0;
  dlock__mu_lock(&a->e->mu);
  a->g->maybe = 1; /* until the answer says which revision */
  a->g->key_lease = a->g->lease = a->s.id;
  a->g->sess_gen = a->s.gen;
  dlock__mu_unlock(&a->e->mu);
  a->w.queued = 1;
  rc = look(a, 0);
  dlock__mu_lock(&a->e->mu);
  if (a->rev) {
    a->g->rev = a->rev;
    a->g->maybe = 0;
  } else if (!dlock__eng_answered(rc)) {
    /* a copy may still make the key: the lease thread looks for it */
    a->g->maybe_at = dlock__now_ms() + 2000;
    a->g->maybe_n = 0;
  } else {
    a->g->maybe = 0;
  }
  dlock__mu_unlock(&a->e->mu);
  if (rc < 0)
    return rc;
  int p = place(a);
  if (p < 0 && a->kvs.n > 0) {
    /* the create's answer had the first key only, another's: read them all
     * (and check ours is still there) */
    if ((rc = look(a, 1)) < 0)
      return rc;
    p = rc == 0 ? -1 : place(a);
  }
  return p == 0 ? 1 : 0; /* p < 0: gone already, wait_turn makes it again */
}

/* Steps 3-4: waits behind the key ahead until ours is first. 1 held, or a
 * code (the wait's end: the caller deletes the key). */
static int wait_turn(acq *a) {
  for (int round = 0; round < 1000000; round++) {
    int p = place(a);
    if (p == 0)
      return 1;
    if (p < 0) { /* our key is gone: its lease expired, or it was deleted */
      int rc = wait_over(a);
      if (rc == 0)
        rc = enqueue(a);
      if (rc != 0)
        return rc;
      continue;
    }
    int64_t until;
    int v = dlock__eng_wait_answer(0, -1, a->b.wait_ms, &a->w, dlock__now_ms(),
                                   DLOCK__ENG_QUEUED_RECHECK_MS, &until);
    if (v == DLOCK__WAIT_BUSY)
      return dlock__fail(DLOCK_EBUSY, "lock '%s' is held elsewhere",
                         a->m->name);
    if (v != DLOCK__WAIT_SLEEP) { /* the deadline passed */
      int rc = wait_over(a);
      return rc ? rc
                : dlock__fail(DLOCK_ETIMEDOUT,
                              "lock '%s' still held elsewhere after %lld ms",
                              a->m->name, a->b.wait_ms);
    }
    a->waited = 1;
    int rc = watch_ahead(a, &a->kvs.v[p - 1], until);
    if (rc == 0)
      rc = wait_over(a);
    if (rc == 0 && (rc = look(a, 1)) == 0) {
      dlock__etcd_kvs_free(&a->kvs); /* gone: place() says -1 */
      rc = 0;
    } else if (rc == 1) {
      rc = 0;
    }
    if (rc < 0)
      return rc;
  }
  return dlock__fail(DLOCK_ETIMEDOUT, "lock '%s': too many rounds", a->m->name);
}

/* Step 5 for a fixed lease: the key moves to a lease of its own. 0 (a->sent
 * and a->ttl set), or a code. */
static int fix_lease(acq *a) {
  int64_t ttl_ms = 0, sent = 0;
  int rc = dlock__etcd_grant(a->e, a->lease_ms / 1000, &a->hold_lease, &ttl_ms,
                             &sent);
  if (rc)
    return rc;
  dlock__sb b;
  dlock__sb_init(&b);
  dlock__sb_adds(&b, "{\"compare\":[{\"key\":\"");
  dlock__etcd_b64(&b, a->key.p, a->key.len);
  dlock__sb_adds(&b, "\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
                     "\"create_revision\":");
  dlock__etcd_jint(&b, a->rev);
  dlock__sb_adds(&b, "}],\"success\":[{\"request_put\":{\"key\":\"");
  dlock__etcd_b64(&b, a->key.p, a->key.len);
  dlock__sb_adds(&b, "\",\"value\":\"");
  holder_value(a, &b);
  dlock__sb_adds(&b, "\",\"lease\":");
  dlock__etcd_jint(&b, a->hold_lease);
  dlock__sb_adds(&b, "}}]}");
  dlock__etcd_res res = {0};
  rc = b.oom
           ? dlock__fail(DLOCK_ENOMEM, "out of memory")
           : dlock__etcd_call(a->e, "/v3/kv/txn", &b, DLOCK__ETCD_RETRY, &res);
  dlock__sb_free(&b);
  if (rc == 0) {
    int ok = json_object_get_boolean(dlock__etcd_get(res.json, "succeeded"));
    a->hrev = dlock__etcd_rev(res.json);
    json_object_put(res.json);
    if (!ok)
      rc = dlock__fail(DLOCK_ELOST,
                       "lock '%s': its key was deleted as it was taken",
                       a->m->name);
  }
  if (rc) {
    dlock__err_keep_begin();
    (void)dlock__etcd_revoke(a->e, a->hold_lease);
    dlock__err_keep_end();
    return rc;
  }
  a->sent = sent;
  a->ttl = a->lease_ms < ttl_ms ? a->lease_ms : ttl_ms;
  return 0;
}

/* Step 5 for the session: the deadline from its last confirmed keepalive.
 * A session whose deadline is near (keepalives failing) is renewed by a
 * keepalive first. 0, or DLOCK_ECONN when the hold would have no time. */
static int session_deadline(acq *a) {
  dlock__etcd *e = a->e;
  dlock__mu_lock(&e->mu);
  int64_t sent = e->s.ok_sent, ttl = e->s.ttl_ms, id = e->s.id;
  dlock__mu_unlock(&e->mu);
  int64_t now = dlock__now_ms();
  if (id == a->s.id && dlock__eng_deadline(sent, ttl) - now < ttl / 3) {
    char body[64];
    snprintf(body, sizeof body, "{\"ID\":\"%lld\"}", (long long)id);
    dlock__etcd_res res = {0};
    if (dlock__etcd_calls(e, "/v3/lease/keepalive", body, DLOCK__ETCD_RETRY,
                          &res) == 0) {
      int64_t t = dlock__etcd_int(dlock__etcd_get(res.json, "result"), "TTL");
      json_object_put(res.json);
      if (t > 0 && res.sent > sent) {
        sent = res.sent;
        ttl = t * 1000;
        dlock__mu_lock(&e->mu);
        if (e->s.id == id && sent > e->s.ok_sent) {
          e->s.ok_sent = sent;
          e->s.ttl_ms = ttl;
          dlock__etcd_gates_renewed(e, sent, ttl);
        }
        dlock__mu_unlock(&e->mu);
      }
    }
  }
  if (id != a->s.id || dlock__eng_deadline(sent, ttl) <= dlock__now_ms())
    return dlock__fail(DLOCK_ECONN,
                       "lock '%s': taken, but the session lease could not be "
                       "renewed in time (no keepalive answered): given back",
                       a->m->name);
  a->sent = sent;
  a->ttl = ttl;
  return 0;
}

/* ---- holds ------------------------------------------------------------------
 */

/* Forgets the thread's holds and frees the record (c->reg.mu held). */
static void drop_hold(dlock_client *c, dlock__hold *h) {
  dlock__eng_forget(h);
  dlock__wd_remove(c, h);
  dlock__hold_put(c, h);
}

/* The gate of m (made by dlock__etcd_mutex_attach). */
static dlock__etcd_gate *gate_of(dlock_mutex *m) {
  dlock__etcd *e = m->c->etcd;
  dlock__mu_lock(&e->mu);
  dlock__etcd_gate *g = dlock__etcd_gate_get(e, m->name, m->name_len);
  dlock__mu_unlock(&e->mu);
  return g;
}

/* The thread no longer holds g's key (its hold ended or was forgotten):
 * the key, when one is left, is stale; the gate passes on. */
static void gate_release(dlock__etcd *e, dlock__etcd_gate *g, uint64_t tid) {
  dlock__mu_lock(&e->mu);
  if (g->owner == tid) {
    g->held = 0;
    g->busy = 1; /* gate_done clears it and passes the gate on */
    dlock__etcd_gate_done(e, g, tid);
  }
  dlock__mu_unlock(&e->mu);
}

static int settle(dlock_mutex *m, dlock__etcd_gate *g, uint64_t tid);

/* The engine's verdict on the thread's existing hold. 1: a re-entry,
 * recorded (nothing is sent: the key is the thread's already); 0: a first
 * hold, go on; or a code (a lost or expired hold: dropped). */
static int reenter(acq *a) {
  dlock_client *c = a->c;
  dlock__mu_lock(&c->reg.mu);
  dlock__hold *h = dlock__hold_find(a->m->e, a->tid);
  int gone = dlock__eng_reenter(h, a->b.started, &a->prior);
  if (gone == DLOCK__ENG_SETTLE) {
    dlock__mu_unlock(&c->reg.mu);
    int rc = settle(a->m, a->g, a->tid);
    if (rc)
      return rc;
    dlock__mu_lock(&c->reg.mu);
    h = dlock__hold_find(a->m->e, a->tid);
    gone = dlock__eng_reenter(h, a->b.started, &a->prior);
    if (gone == DLOCK__ENG_SETTLE) {
      dlock__mu_unlock(&c->reg.mu);
      dlock__never("a settled release is pending again");
    }
  }
  if (gone) {
    int was_lost = gone == DLOCK__ENG_RAN_OUT ? 0 : gone;
    if (!was_lost)
      dlock__stat_add(&c->stats, DLOCK__ST_LOST_EXPIRED, 1);
    drop_hold(c, h);
    dlock__mu_unlock(&c->reg.mu);
    gate_release(a->e, a->g, a->tid);
    return was_lost ? dlock__fail(DLOCK_ELOST,
                                  "lock '%s': this thread's hold was lost: %s",
                                  a->m->name, dlock__lost_why(was_lost))
                    : dlock__fail(DLOCK_ELOST,
                                  "lock '%s': this thread's hold ran out of "
                                  "lease (its local deadline passed)",
                                  a->m->name);
  }
  if (a->prior > 0) {
    /* counted here only: the key is this thread's already (its lease and
     * deadline stay the first acquisition's, docs/etcd.md) */
    dlock__hold_note(h, a->prior + 1, a->wd, a->wd ? 0 : a->lease_ms, 0, 0);
    dlock__stat_add(&c->stats, DLOCK__ST_REENTERED, 1);
    dlock__mu_unlock(&c->reg.mu);
    return 1;
  }
  dlock__mu_unlock(&c->reg.mu);
  return 0;
}

/* A key an earlier hold or wait of this client left (its delete got no
 * answer) is deleted before a new one is made: a late copy of that delete
 * could otherwise act on the new hold. 0 or the failure. */
static int settle_stale(acq *a) {
  dlock__etcd *e = a->e;
  dlock__mu_lock(&e->mu);
  int64_t rev = a->g->held ? 0 : a->g->rev, kl = a->g->key_lease;
  dlock__mu_unlock(&e->mu);
  if (!rev)
    return 0;
  dlock__sb b;
  dlock__sb_init(&b);
  dlock__etcd_res res = {0};
  int rc = dlock__etcd_delete_body(e, a->g, kl, rev, &b);
  if (rc == 0)
    rc = dlock__etcd_call(e, "/v3/kv/txn", &b, DLOCK__ETCD_RETRY, &res);
  dlock__sb_free(&b);
  if (rc)
    return rc;
  json_object_put(res.json);
  dlock__mu_lock(&e->mu);
  if (a->g->rev == rev && !a->g->held)
    a->g->rev = 0;
  dlock__mu_unlock(&e->mu);
  return 0;
}

/* The acquisition a made, recorded (the engine's deadline) and watched. */
static int record(acq *a) {
  dlock_client *c = a->c;
  dlock__mu_lock(&c->reg.mu);
  dlock__hold *h = dlock__hold_get(a->m->e, a->tid);
  if (!h) {
    dlock__mu_unlock(&c->reg.mu);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  if (h->count == 0 && a->tid == dlock__tid())
    dlock__thread_note(c); /* thread exit: holds.c */
  dlock__hold_note(h, 1, a->wd, a->ttl, a->sent, (uint64_t)a->rev);
  uint32_t gen = h->gen;
  dlock__mu_unlock(&c->reg.mu);
  dlock__mu_lock(&a->e->mu);
  dlock__etcd_gate *g = a->g;
  g->held = 1;
  g->fixed = !a->wd;
  g->lease = a->wd ? a->s.id : a->hold_lease;
  g->rev = a->rev;
  g->watch_rev = a->hrev;
  g->hold_gen = gen;
  g->held_at = dlock__now_ms();
  int64_t watch_at = g->held_at + DLOCK__ETCD_WATCH_AFTER_MS;
  dlock__mu_unlock(&a->e->mu);
  if (watch_at < atomic_load(&a->e->wake_at)) /* asleep past it */
    dlock__etcd_lease_poke(a->e);
  return 0;
}

static void count_acquired(const acq *a) {
  int64_t waited =
      dlock__stat_acquired(&a->c->stats, a->waited, a->waited, a->b.started);
  if (dlock__log_on(&a->c->cfg, DLOCK_LOG_DEBUG))
    dlock__log(&a->c->cfg, DLOCK_LOG_DEBUG, a->m->name, "acquired",
               "acquired on etcd (revision %lld, %s, waited %lld ms)",
               (long long)a->rev, a->wd ? "session lease" : "fixed lease",
               (long long)waited);
}

static void acq_free(acq *a) {
  dlock__sb_free(&a->key);
  dlock__sb_free(&a->from);
  dlock__sb_free(&a->to);
  dlock__etcd_kvs_free(&a->kvs);
}

/* The recipe with the gate taken: 0 held (recorded), or a code. */
static int take(acq *a) {
  int rc = settle_stale(a);
  if (rc == 0)
    rc = enqueue(a);
  if (rc == 0)
    rc = dlock__budget_end(&a->b, wait_turn(a), a->what);
  if (rc == 1)
    rc = a->wd ? session_deadline(a) : fix_lease(a);
  if (rc == 0)
    rc = record(a);
  if (rc == 0) {
    count_acquired(a);
    return 0;
  }
  /* The wait ends without the lock: its key goes (engine: a wait that may
   * be queued leaves the queue on every end). */
  if (dlock__eng_wait_end(rc, &a->w) == DLOCK__WAIT_CANCEL && a->rev) {
    dlock__err_keep_begin();
    int dr = drop_key(a);
    dlock__err_keep_end();
    dlock__mu_lock(&a->e->mu);
    if (dr == 0 && a->g->rev == a->rev && !a->g->held)
      a->g->rev = 0;
    dlock__mu_unlock(&a->e->mu);
  }
  if (rc == DLOCK_ETIMEDOUT || rc == DLOCK_ECANCELED)
    dlock__stat_add(
        &a->c->stats,
        rc == DLOCK_ETIMEDOUT ? DLOCK__ST_TIMEOUTS : DLOCK__ST_CANCELS, 1);
  return rc;
}

int dlock__etcd_acquire(dlock_mutex *m, long long wait_ms, long long lease_ms) {
  if (!m)
    return dlock__fail(DLOCK_EINVAL, "mutex is NULL");
  dlock_client *c = m->c;
  int rc = dlock__client_check(c);
  if (rc || (rc = etcd_lease_ok(lease_ms, m->name)) != 0)
    return rc;
  acq a;
  memset(&a, 0, sizeof a);
  a.m = m;
  a.c = c;
  a.e = c->etcd;
  a.tid = dlock__tid();
  a.wd = lease_ms <= 0;
  a.lease_ms = a.wd ? 0 : lease_ms;
  dlock__budget_start(&a.b, c, wait_ms);
  a.w.deadline = a.b.deadline;
  if (wait_ms != 0)
    a.w.id = dlock__eng_wait_id();
  snprintf(a.what, sizeof a.what, "lock '%.250s'", m->name);
  dlock__sb_init(&a.key);
  dlock__sb_init(&a.from);
  dlock__sb_init(&a.to);
  dlock__etcd_range(a.e, &a.from, &a.to, m->name);
  if (!(a.g = gate_of(m)) || a.from.oom || a.to.oom) {
    acq_free(&a);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  rc = reenter(&a);
  if (rc == 0 &&
      (rc = dlock__etcd_gate_enter(a.e, a.g, a.tid, &a.b, a.what)) == 0) {
    rc = take(&a);
    dlock__mu_lock(&a.e->mu);
    dlock__etcd_gate_done(a.e, a.g, a.tid);
    dlock__mu_unlock(&a.e->mu);
  } else if (rc == DLOCK_ETIMEDOUT || rc == DLOCK_ECANCELED) {
    dlock__stat_add(
        &c->stats,
        rc == DLOCK_ETIMEDOUT ? DLOCK__ST_TIMEOUTS : DLOCK__ST_CANCELS, 1);
  }
  acq_free(&a);
  return rc == 1 ? 0 : rc;
}

/* ---- unlock
 * ------------------------------------------------------------------ */

/* The delete of a hold's key (final unlock, or its committing copy):
 * 1 released, DLOCK_ELOST (not there: expired, deleted), or a code. */
static int send_release(dlock__etcd *e, dlock__etcd_gate *g, int fixed,
                        int64_t lease, int64_t key_lease, int64_t rev,
                        int *sends) {
  *sends = 1;
  if (fixed) {
    int rc = dlock__etcd_revoke(e, lease);
    return rc == 0 ? 1 : rc;
  }
  dlock__sb b;
  dlock__sb_init(&b);
  dlock__etcd_res res = {0};
  memset(&res, 0, sizeof res);
  int rc = dlock__etcd_delete_body(e, g, key_lease, rev, &b);
  if (rc == 0)
    rc = dlock__etcd_call(e, "/v3/kv/txn", &b, DLOCK__ETCD_RETRY, &res);
  dlock__sb_free(&b);
  *sends = res.sends > 0 ? res.sends : 1;
  if (rc)
    return rc;
  int ok = json_object_get_boolean(dlock__etcd_get(res.json, "succeeded"));
  json_object_put(res.json);
  return ok ? 1 : DLOCK_ELOST;
}

/* What the record's release sends, read under e->mu: the gate's key when it
 * is the hold's (rev), else 0 (the key is known gone). */
typedef struct rel_key {
  int fixed;
  int64_t lease, key_lease, rev;
} rel_key;

static rel_key rel_key_of(dlock__etcd *e, dlock__etcd_gate *g, int64_t rev) {
  rel_key k = {0, 0, 0, 0};
  dlock__mu_lock(&e->mu);
  if (g->rev == rev && rev) {
    k.fixed = g->fixed;
    k.lease = g->lease;
    k.key_lease = g->key_lease;
    k.rev = rev;
  }
  dlock__mu_unlock(&e->mu);
  return k;
}

/* After an answered release of the key of revision rev: it is gone. */
static void key_released(dlock__etcd *e, dlock__etcd_gate *g, int64_t rev) {
  dlock__mu_lock(&e->mu);
  if (g->rev == rev)
    g->rev = 0;
  dlock__mu_unlock(&e->mu);
}

static int settle(dlock_mutex *m, dlock__etcd_gate *g, uint64_t tid) {
  dlock_client *c = m->c;
  dlock__eng_unlock u;
  dlock__mu_lock(&c->reg.mu);
  dlock__hold *h = dlock__hold_find(m->e, tid);
  if (!h || h->unlock_pending == 0) {
    dlock__mu_unlock(&c->reg.mu);
    return 0;
  }
  dlock__eng_settle_begin(h, &u);
  int64_t rev = (int64_t)h->token;
  dlock__mu_unlock(&c->reg.mu);
  rel_key k = rel_key_of(c->etcd, g, rev);
  int sends = 1;
  /* no key of that revision any more: a delete of ours answered it */
  int rc = k.rev ? send_release(c->etcd, g, k.fixed, k.lease, k.key_lease,
                                k.rev, &sends)
                 : 1;
  if (dlock__eng_answered(rc))
    key_released(c->etcd, g, rev);
  dlock__mu_lock(&c->reg.mu);
  dlock__eng_rel_out o = dlock__eng_unlock_end(h, &u, rc, 1, dlock__now_ms());
  if (o.action == DLOCK__ENG_REL_PUT)
    dlock__hold_put(c, h);
  else if (o.action == DLOCK__ENG_REL_FORGET)
    drop_hold(c, h);
  else if (o.action == DLOCK__ENG_REL_ONE)
    dlock__hold_drop_one(h);
  int end = dlock__eng_settle_end(dlock__hold_find(m->e, tid), rc);
  dlock__mu_unlock(&c->reg.mu);
  if (o.action == DLOCK__ENG_REL_FORGET)
    gate_release(c->etcd, g, tid);
  return end == 0
             ? 0
             : dlock__fail(end,
                           "lock '%s': an earlier unlock's outcome is still "
                           "unknown (%.200s)",
                           m->name, dlock_last_error());
}

/* The record after the unlock's answer (c->reg.mu held): the engine's
 * action, the counters and log lines mutex.c's rel_end keeps. */
static dlock__eng_rel_out rel_end(dlock_mutex *m, dlock__hold *h,
                                  const dlock__eng_unlock *u, int rc,
                                  int sends) {
  dlock_client *c = m->c;
  int reported = h->lost;
  dlock__eng_rel_out o =
      dlock__eng_unlock_end(h, u, rc, sends > 1, dlock__now_ms());
  if (o.action == DLOCK__ENG_REL_FORGET && !reported) {
    if (o.ran_out) {
      dlock__stat_add(&c->stats, DLOCK__ST_LOST_EXPIRED, 1);
      dlock__log(&c->cfg, DLOCK_LOG_WARN, m->name, "expired",
                 "expired: the hold's lease ran out before it was unlocked");
    } else if (o.rc == DLOCK_ELOST) {
      dlock__stat_add(&c->stats, DLOCK__ST_LOST_FORCED, 1);
      dlock__log(&c->cfg, DLOCK_LOG_ERROR, m->name, "lost",
                 "lost: the unlock found this thread's key gone before its "
                 "lease ended (force-unlocked or deleted)");
    } else {
      dlock__stat_add(&c->stats, DLOCK__ST_RELEASED, 1);
    }
  }
  if (o.action == DLOCK__ENG_REL_PUT)
    dlock__hold_put(c, h);
  else if (o.action == DLOCK__ENG_REL_FORGET)
    drop_hold(c, h);
  else if (o.action == DLOCK__ENG_REL_ONE)
    dlock__hold_drop_one(h);
  return o;
}

/* Begins the unlock: 0 (u filled, *rev the hold's), or a code. */
static int rel_begin(dlock_mutex *m, dlock__etcd_gate *g, uint64_t tid,
                     dlock__hold **hp, dlock__eng_unlock *u, int64_t *rev) {
  dlock_client *c = m->c;
  for (int i = 0; i < 2; i++) {
    dlock__mu_lock(&c->reg.mu);
    dlock__hold *h = dlock__hold_find(m->e, tid);
    int rc = dlock__eng_unlock_begin(h, dlock__now_ms(),
                                     c->cfg.watchdog_timeout_ms, u);
    if (rc == DLOCK__ENG_SETTLE) {
      dlock__mu_unlock(&c->reg.mu);
      if (i == 1)
        dlock__never("a settled release is pending again");
      if ((rc = settle(m, g, tid)) != 0)
        return rc;
      continue;
    }
    if (rc == DLOCK_ELOST) {
      int why = h->lost;
      drop_hold(c, h);
      dlock__mu_unlock(&c->reg.mu);
      gate_release(c->etcd, g, tid);
      return dlock__fail(DLOCK_ELOST, "lock '%s' was lost while held: %s",
                         m->name, dlock__lost_why(why));
    }
    *hp = h;
    *rev = h ? (int64_t)h->token : 0;
    dlock__mu_unlock(&c->reg.mu);
    return rc == DLOCK_EPERM ? dlock__fail(DLOCK_EPERM,
                                           "lock '%s' is not held by this "
                                           "thread",
                                           m->name)
                             : rc;
  }
  return DLOCK_EPERM;
}

int dlock__etcd_release(dlock_mutex *m) {
  if (!m)
    return dlock__fail(DLOCK_EINVAL, "mutex is NULL");
  dlock_client *c = m->c;
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  const uint64_t tid = dlock__tid();
  dlock__etcd_gate *g = gate_of(m);
  if (!g)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  dlock__hold *h = NULL;
  dlock__eng_unlock u;
  int64_t rev = 0;
  if ((rc = rel_begin(m, g, tid, &h, &u, &rev)) != 0)
    return rc;
  if (!h) /* rel_begin answers DLOCK_EPERM without a record */
    return dlock__fail(DLOCK_EPERM, "lock '%s' is not held by this thread",
                       m->name);
  int sends = 1;
  if (u.expected > 1) {
    rc = 0; /* holds remain: counted here, nothing to send */
  } else {
    rel_key k = rel_key_of(c->etcd, g, rev);
    rc = k.rev ? send_release(c->etcd, g, k.fixed, k.lease, k.key_lease, k.rev,
                              &sends)
               : (u.resent ? 1 : DLOCK_ELOST);
    if (dlock__eng_answered(rc))
      key_released(c->etcd, g, rev);
  }
  dlock__mu_lock(&c->reg.mu);
  dlock__eng_rel_out o = rel_end(m, h, &u, rc, sends);
  dlock__mu_unlock(&c->reg.mu);
  if (o.action == DLOCK__ENG_REL_FORGET ||
      (u.expected == 1 && !dlock__eng_answered(rc)))
    gate_release(c->etcd, g, tid);
  char why[DLOCK__ENG_WHY_LEN];
  if (o.rc == DLOCK_ELOST)
    return dlock__fail(DLOCK_ELOST, "%s",
                       dlock__eng_lost_why(&o, m->name, why, sizeof why));
  return o.rc;
}

/* ---- objects and questions -------------------------------------------------
 */

int dlock__etcd_mutex_attach(dlock_mutex *m) {
  dlock__etcd *e = m->c->etcd;
  dlock__mu_lock(&e->mu);
  dlock__etcd_gate *g = dlock__etcd_gate_get(e, m->name, m->name_len);
  if (g) {
    g->objects++;
    g->ent = m->e;
  }
  dlock__mu_unlock(&e->mu);
  return g ? 0 : dlock__fail(DLOCK_ENOMEM, "out of memory");
}

void dlock__etcd_mutex_detach(dlock_mutex *m) {
  dlock__etcd *e = m->c->etcd;
  dlock__mu_lock(&e->mu);
  dlock__etcd_gate *g = dlock__etcd_gate_get(e, m->name, m->name_len);
  if (g && --g->objects <= 0) {
    /* the last object: its holds are abandoned (holds.c forgets them);
     * their key is deleted by the lease thread -- the session lease would
     * keep it for ever otherwise */
    g->objects = 0;
    g->ent = NULL;
    if (!g->busy) {
      g->held = 0;
      g->owner = 0;
    }
    dlock__etcd_lease_poke(e);
  }
  dlock__mu_unlock(&e->mu);
}

/* The name's keys now (a linearizable read), sorted by create revision. */
static int read_keys(dlock_mutex *m, dlock__etcd_kvs *kvs) {
  return dlock__etcd_read_keys(m->c->etcd, m->name, kvs, 1);
}

int dlock__etcd_is_locked(dlock_mutex *m) {
  dlock__etcd_kvs kvs;
  int rc = read_keys(m, &kvs);
  if (rc)
    return rc;
  rc = kvs.n > 0;
  dlock__etcd_kvs_free(&kvs);
  return rc;
}

/* The thread's record: 1 valid (count in *n, token in *rev), 0 lost or
 * past its deadline, -1 none. */
static int local_hold(dlock_mutex *m, int *n, int64_t *rev) {
  dlock_client *c = m->c;
  dlock__mu_lock(&c->reg.mu);
  dlock__hold *h = dlock__hold_find(m->e, dlock__tid());
  int st = !h || h->count == 0 ? -1 : dlock__eng_valid(h, dlock__now_ms());
  *n = h ? h->count : 0;
  *rev = h ? (int64_t)h->token : 0;
  dlock__mu_unlock(&c->reg.mu);
  return st;
}

/* 1 if the thread's key of revision rev is the holder now, 0 not, or a
 * code. */
static int key_is_holder(dlock_mutex *m, int64_t rev) {
  dlock__etcd_kvs kvs;
  int rc = read_keys(m, &kvs);
  if (rc)
    return rc;
  rc = kvs.n > 0 && kvs.v[0].create == rev;
  dlock__etcd_kvs_free(&kvs);
  return rc;
}

int dlock__etcd_is_held(dlock_mutex *m) {
  int n = 0;
  int64_t rev = 0;
  int st = local_hold(m, &n, &rev);
  if (st <= 0)
    return 0;
  int rc = key_is_holder(m, rev);
  if (rc == DLOCK_ECONN) {
    /* etcd cannot be asked; the local deadline has not passed, so the
     * key cannot have expired yet: held */
    dlock__clear_error();
    return 1;
  }
  return rc;
}

int dlock__etcd_hold_count(dlock_mutex *m) {
  int n = 0;
  int64_t rev = 0;
  if (local_hold(m, &n, &rev) <= 0)
    return 0;
  int rc = key_is_holder(m, rev);
  return rc < 0 ? rc : (rc ? n : 0);
}

int dlock__etcd_ttl(dlock_mutex *m, long long *ttl_ms) {
  dlock__etcd_kvs kvs;
  int rc = read_keys(m, &kvs);
  if (rc)
    return rc;
  int64_t lease = kvs.n ? kvs.v[0].lease : 0;
  *ttl_ms = kvs.n == 0 ? -2 : -1;
  dlock__etcd_kvs_free(&kvs);
  if (!lease)
    return 0;
  char body[80];
  snprintf(body, sizeof body, "{\"ID\":\"%lld\"}", (long long)lease);
  dlock__etcd_res res = {0};
  if ((rc = dlock__etcd_calls(m->c->etcd, "/v3/lease/timetolive", body,
                              DLOCK__ETCD_RETRY, &res)) != 0)
    return rc;
  int64_t t = dlock__etcd_int(res.json, "TTL");
  json_object_put(res.json);
  *ttl_ms = t >= 0 ? t * 1000 : -2;
  return 0;
}
