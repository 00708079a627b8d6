/*
 * etcd_gate.c -- the etcd store's gates: what one client does with one lock
 * name, and the lease thread's care of it (the holders' own-key watches,
 * the clean-up of keys left behind, the engine's expiry verdicts).
 *
 * WHY A GATE. A client has one key per lock name -- <name>/<its session
 * lease> -- as etcd's concurrency.Mutex does, so `etcdctl lock` and Go
 * clients see one waiter per client. So at most one thread of a client is
 * in the recipe or holds the lock; the client's other threads wait here,
 * in arrival order (the engine's reentrancy stays per thread: holds.c's
 * records). The gate also remembers the key: its create revision (the
 * hold's identity, the fencing token, and what every delete compares), the
 * lease attached to it, and whether a delete of it is still unconfirmed.
 *
 * KEYS LEFT BEHIND. A wait that timed out or was cancelled deletes its key;
 * when that delete gets no answer, or a hold was lost (its deadline passed
 * while the cluster had no quorum, its thread exited, its object was
 * freed), the key is "stale": the lease thread deletes it (compare on its
 * create revision, so it never touches a later key), and the next thread
 * that takes the gate deletes it first, before it makes its own.
 *
 * THE OWN-KEY WATCH. While a thread holds the lock, the lease thread keeps
 * a watch on the key from the revision that made it the holder (DELETE
 * events only): a force unlock, an operator's delete or a revoked lease is
 * reported through on_lock_lost at once, not at the next keepalive. A
 * DELETE after the hold's local deadline is the lease ending as the engine
 * already said (quiet), one during the owner's own unlock is the unlock.
 */
#include <stdlib.h>
#include <string.h>

#include "etcd/etcd_int.h"

/* A local thread waiting for the gate. */
typedef struct gwait {
  struct gwait *next;
  uint64_t tid;
} gwait;

/* The lease thread's watch of a holder's key. */
typedef struct gwatch {
  dlock__etcd_req r;
  dlock__etcd_gate *g;
  int64_t from;       /* start revision */
  int64_t restart_at; /* after a failure: not before */
  int64_t rev;        /* the key it watches (its create revision) */
  int busy;           /* on the multi */
  int deleted;        /* a DELETE came */
  int compacted;      /* cancelled for compaction: look again */
} gwatch;

dlock__etcd_gate *dlock__etcd_gate_get(dlock__etcd *e, const char *name,
                                       size_t len) {
  for (dlock__etcd_gate *g = e->gates; g; g = g->next)
    if (g->name_len == len && memcmp(g->name, name, len) == 0)
      return g;
  dlock__etcd_gate *g = dlock__calloc(1, sizeof *g + len + 1);
  if (!g)
    return NULL;
  if (dlock__cond_init_mono(&g->cv) != 0) {
    free(g);
    return NULL;
  }
  memcpy(g->name, name, len);
  g->name_len = len;
  g->next = e->gates;
  e->gates = g;
  return g;
}

static void gate_free(dlock__etcd_gate *g) {
  pthread_cond_destroy(&g->cv);
  free(g);
}

int dlock__etcd_delete_body(dlock__etcd *e, const dlock__etcd_gate *g,
                            int64_t key_lease, int64_t rev, dlock__sb *b) {
  dlock__sb k;
  dlock__sb_init(&k);
  dlock__etcd_key(e, &k, g->name, key_lease);
  dlock__sb_reset(b);
  dlock__sb_adds(b, "{\"compare\":[{\"key\":\"");
  dlock__etcd_b64(b, k.p, k.len);
  dlock__sb_adds(b, "\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
                    "\"create_revision\":");
  dlock__etcd_jint(b, rev);
  dlock__sb_adds(b, "}],\"success\":[{\"request_delete_range\":{\"key\":\"");
  dlock__etcd_b64(b, k.p, k.len);
  dlock__sb_adds(b, "\"}}]}");
  int oom = k.oom || b->oom;
  dlock__sb_free(&k);
  return oom ? dlock__fail(DLOCK_ENOMEM, "out of memory") : 0;
}

/* ---- the local queue ------------------------------------------------------
 */

/* The owner's hold record is gone or lost while no call of it runs (its
 * thread exited, its object was freed, the engine declared it lost): the
 * gate is free again and its key stale (e->mu held; takes c->reg.mu). */
static void orphan_check(dlock__etcd *e, dlock__etcd_gate *g) {
  if (!g->owner || g->busy)
    return;
  dlock_client *c = e->c;
  int gone = 1;
  dlock__mu_lock(&c->reg.mu);
  if (g->ent) {
    dlock__hold *h = dlock__hold_find(g->ent, g->owner);
    gone = !h || h->count == 0 || h->lost || h->gen != g->hold_gen;
  }
  dlock__mu_unlock(&c->reg.mu);
  if (!gone)
    return;
  g->held = 0; /* its key, if any, is stale: deleted before the next one */
  g->owner = 0;
  pthread_cond_broadcast(&g->cv);
}

/* The head of the queue takes a free gate (e->mu held). 1 if tid got it. */
static int take_if_first(dlock__etcd_gate *g, uint64_t tid) {
  gwait *head = g->queue;
  if (g->owner || !head || head->tid != tid)
    return 0;
  g->queue = head->next;
  g->owner = tid;
  g->busy = 1;
  pthread_cond_broadcast(&g->cv);
  return 1;
}

static void unqueue(dlock__etcd_gate *g, gwait *w) {
  for (gwait **pp = (gwait **)&g->queue; *pp; pp = &(*pp)->next)
    if (*pp == w) {
      *pp = w->next;
      break;
    }
  pthread_cond_broadcast(&g->cv);
}

int dlock__etcd_gate_enter(dlock__etcd *e, dlock__etcd_gate *g, uint64_t tid,
                           const dlock__budget *b, const char *what) {
  dlock__mu_lock(&e->mu);
  orphan_check(e, g);
  if (!g->owner && !g->queue) {
    g->owner = tid;
    g->busy = 1;
    dlock__mu_unlock(&e->mu);
    return 0;
  }
  if (b->wait_ms == 0) {
    dlock__mu_unlock(&e->mu);
    return dlock__fail(DLOCK_EBUSY,
                       "%s is held (or being acquired) by another thread of "
                       "this client",
                       what);
  }
  gwait w = {NULL, tid};
  gwait **pp = (gwait **)&g->queue;
  while (*pp)
    pp = &(*pp)->next;
  *pp = &w;
  int rc = 0;
  for (;;) {
    if (take_if_first(g, tid))
      break;
    if ((rc = dlock__budget_over(b, what)) != 0) {
      if (rc == DLOCK_ETIMEDOUT)
        rc = dlock__fail(DLOCK_ETIMEDOUT,
                         "%s still held by another thread of this client "
                         "after %lld ms",
                         what, b->wait_ms);
      unqueue(g, &w);
      break;
    }
    int64_t left = dlock__budget_left(b);
    int64_t ms = left < 0 || left > 200 ? 200 : (left > 0 ? left : 1);
    struct timespec ts = dlock__abstime(CLOCK_MONOTONIC, ms);
    pthread_cond_timedwait(&g->cv, &e->mu, &ts);
    orphan_check(e, g);
  }
  dlock__mu_unlock(&e->mu);
  return rc;
}

void dlock__etcd_gate_done(dlock__etcd *e, dlock__etcd_gate *g, uint64_t tid) {
  if (g->owner != tid)
    return;
  g->busy = 0;
  if (!g->held) {
    g->owner = 0;
    pthread_cond_broadcast(&g->cv);
  }
  /* the lease thread is woken only for work: a key to delete (a hold
   * begins unwatched: watch_tick starts its watch when it has lasted) */
  if ((g->rev && !g->held) || g->maybe)
    dlock__etcd_lease_poke(e);
}

/* ---- losses
 * ------------------------------------------------------------------ */

/* The hold of gate g, when it is the one the gate knows (c->reg.mu held). */
static dlock__hold *gate_hold(dlock__etcd_gate *g) {
  if (!g->ent || !g->owner)
    return NULL;
  dlock__hold *h = dlock__hold_find(g->ent, g->owner);
  return h && h->gen == g->hold_gen && h->count > 0 ? h : NULL;
}

/* The key of held gate g is gone (e->mu held): the hold is lost -- unless
 * its owner is releasing it, or its local deadline passed already (the
 * engine said so then, or a fixed lease ended as it should). */
static void key_gone(dlock__etcd *e, dlock__etcd_gate *g, int why,
                     dlock__lost_note **lost) {
  dlock_client *c = e->c;
  int64_t now = dlock__now_ms();
  dlock__mu_lock(&c->reg.mu);
  dlock__hold *h = gate_hold(g);
  int releasing = h && h->releasing;
  if (h && !h->lost && !releasing && now < h->valid_until) {
    h->lost = why;
    dlock__lost_add(lost, g->name, why);
  }
  dlock__mu_unlock(&c->reg.mu);
  if (releasing)
    return; /* the owner's unlock: its answer decides */
  g->held = 0;
  g->rev = 0;
  if (!g->busy) {
    g->owner = 0;
    pthread_cond_broadcast(&g->cv);
  }
}

void dlock__etcd_gates_session_lost(dlock__etcd *e, uint32_t gen,
                                    dlock__lost_note **lost) {
  for (dlock__etcd_gate *g = e->gates; g; g = g->next) {
    if (g->sess_gen != gen || !g->rev)
      continue;
    if (g->held && g->lease == g->key_lease)
      key_gone(e, g, DLOCK__LOST_GONE, lost);
    else if (!g->held && g->lease == g->key_lease)
      g->rev = 0; /* a waiter's or a stale key: gone with the lease */
  }
}

void dlock__etcd_gates_renewed(dlock__etcd *e, int64_t sent, int64_t ttl_ms) {
  dlock_client *c = e->c;
  dlock__mu_lock(&c->reg.mu);
  for (dlock__etcd_gate *g = e->gates; g; g = g->next) {
    if (!g->held || g->fixed || g->lease != e->s.id)
      continue;
    dlock__hold *h = gate_hold(g);
    if (h && !h->lost)
      dlock__eng_renewed(h, sent, ttl_ms);
  }
  dlock__mu_unlock(&c->reg.mu);
}

void dlock__etcd_gates_expiry(dlock__etcd *e, int64_t now, int64_t *next,
                              dlock__lost_note **lost) {
  dlock_client *c = e->c;
  dlock__mu_lock(&c->reg.mu);
  for (dlock__etcd_gate *g = e->gates; g; g = g->next) {
    dlock__hold *h = g->held ? gate_hold(g) : NULL;
    /* a fixed lease ends as the caller asked: told at its unlock, as the
     * Redis store's fixed holds are (dlock__eng_expiry is for the holds a
     * renewal keeps) */
    if (!h || g->fixed || h->lost)
      continue;
    if (dlock__eng_expiry(h, now, next) == DLOCK__ENG_LOST)
      dlock__lost_add(lost, g->name, h->lost);
  }
  dlock__mu_unlock(&c->reg.mu);
}

/* ---- the own-key watch
 * ---------------------------------------------------------- */

static int watch_line(dlock__etcd_req *r, json_object *line) {
  gwatch *w = r->arg;
  json_object *res = dlock__etcd_get(line, "result");
  if (!res)
    return 1; /* an error object: the stream is over, look again */
  if (json_object_get_boolean(dlock__etcd_get(res, "canceled"))) {
    w->compacted = 1;
    return 1;
  }
  json_object *ev = dlock__etcd_get(res, "events");
  size_t n = ev ? json_object_array_length(ev) : 0;
  for (size_t i = 0; i < n; i++) {
    json_object *x = json_object_array_get_idx(ev, i);
    json_object *t = dlock__etcd_get(x, "type");
    if (t && strcmp(json_object_get_string(t), "DELETE") == 0) {
      w->deleted = 1;
      return 1;
    }
  }
  int64_t rev = dlock__etcd_rev(res);
  if (rev >= w->from)
    w->from = rev + 1; /* a restart resumes here */
  return 0;
}

static void watch_done(dlock__etcd_req *r) {
  gwatch *w = r->arg;
  dlock__etcd *e = r->e;
  dlock__mu_lock(&e->mu);
  w->busy = 0;
  dlock__etcd_gate *g = w->g;
  if (w->deleted && g && g->held && g->rev == w->rev)
    key_gone(e, g, DLOCK__LOST_GONE, &e->lost);
  else if (!w->deleted)
    w->restart_at = dlock__now_ms() + (w->compacted ? 0 : 500);
  dlock__mu_unlock(&e->mu);
}

/* Starts (again) the watch of held gate g's key (e->mu held). */
static void watch_start(dlock__etcd *e, dlock__etcd_gate *g, gwatch *w) {
  dlock__sb k, b;
  dlock__sb_init(&k);
  dlock__sb_init(&b);
  dlock__etcd_key(e, &k, g->name, g->key_lease);
  dlock__sb_adds(&b, "{\"create_request\":{\"key\":\"");
  dlock__etcd_b64(&b, k.p, k.len);
  dlock__sb_adds(&b, "\",\"start_revision\":");
  /* after a compaction the history is gone: from now, and the key is
   * looked at by the first event or the next keepalive round */
  dlock__etcd_jint(&b, w->compacted ? 0 : w->from);
  dlock__sb_adds(&b, ",\"filters\":[\"NOPUT\"]}}");
  w->compacted = 0;
  CURL *easy = w->r.easy;
  dlock__etcd_req_free(&w->r);
  memset(&w->r, 0, sizeof w->r);
  w->r.easy = easy;
  if (!k.oom && !b.oom &&
      dlock__etcd_req_init(&w->r, e, "/v3/watch", b.p, b.len,
                           DLOCK__ETCD_ONEROUND) == 0) {
    w->r.stream = 1;
    w->r.on_line = watch_line;
    w->r.on_done = watch_done;
    w->r.arg = w;
    w->busy = dlock__etcd_req_start(&w->r, e->lm) == 0;
  }
  if (!w->busy)
    w->restart_at = dlock__now_ms() + 500;
  dlock__sb_free(&k);
  dlock__sb_free(&b);
}

static void watch_free(dlock__etcd *e, gwatch *w) {
  if (w->busy)
    dlock__etcd_req_stop(&w->r, e->lm);
  dlock__etcd_req_free(&w->r);
  if (w->r.easy)
    curl_easy_cleanup(w->r.easy);
  free(w);
}

/* The watch gate g needs, started, restarted or ended (e->mu held). A
 * hold is watched once it has lasted DLOCK__ETCD_WATCH_AFTER_MS: the
 * watch starts at the revision that made it the holder, so a DELETE in
 * that time is reported all the same (a little later), and the common
 * short hold -- an uncontended lock and unlock -- costs no watch stream. */
static void watch_tick(dlock__etcd *e, dlock__etcd_gate *g, int64_t now,
                       int64_t *next) {
  gwatch *w = g->watch;
  int want = g->held && g->rev && g->objects > 0;
  if (want && !w && now < g->held_at + DLOCK__ETCD_WATCH_AFTER_MS) {
    if (g->held_at + DLOCK__ETCD_WATCH_AFTER_MS < *next)
      *next = g->held_at + DLOCK__ETCD_WATCH_AFTER_MS;
    return;
  }
  if (w && (!want || w->rev != g->rev)) {
    watch_free(e, w);
    g->watch = w = NULL;
  }
  if (!want)
    return;
  if (!w) {
    if (!(w = dlock__calloc(1, sizeof *w)))
      return;
    w->g = g;
    w->rev = g->rev;
    w->from = g->watch_rev + 1;
    g->watch = w;
  }
  if (w->busy || w->deleted)
    return;
  if (now >= w->restart_at)
    watch_start(e, g, w);
  else if (w->restart_at < *next)
    *next = w->restart_at;
}

/* ---- clean-up of stale keys
 * ---------------------------------------------------- */

/* Gate g's background request r is over: r freed, g->sweep cleared. */
static void sweep_end(dlock__etcd_gate *g, dlock__etcd_req *r) {
  dlock__etcd_req_free(r);
  if (r->easy)
    curl_easy_cleanup(r->easy);
  free(r);
  g->sweep = NULL;
}

static void sweep_done(dlock__etcd_req *r) {
  dlock__etcd *e = r->e;
  dlock__etcd_gate *g = r->arg;
  dlock__mu_lock(&e->mu);
  /* deleted now, or gone before: either way no key of that revision
   * exists any more (revisions are never reused) */
  if (r->done && r->rc == 0 && !g->held && g->rev == g->sweep_rev)
    g->rev = 0;
  sweep_end(g, r);
  dlock__mu_unlock(&e->mu);
}

/* The look for a key whose create had no answer: found, it becomes the
 * gate's stale key (deleted by its revision next); not found, looked for
 * again a few times -- a copy of the create may commit late (a proposal a
 * leader appended before it lost its quorum). */
static void maybe_done(dlock__etcd_req *r) {
  dlock__etcd *e = r->e;
  dlock__etcd_gate *g = r->arg;
  dlock__mu_lock(&e->mu);
  if (r->done && r->rc == 0 && g->maybe && !g->owner && !g->busy) {
    dlock__etcd_kvs kvs;
    if (dlock__etcd_kvs_parse(r->res.json, NULL, &kvs) == 0 && kvs.n == 1 &&
        !g->rev) {
      g->rev = kvs.v[0].create;
      g->maybe = 0;
    }
    dlock__etcd_kvs_free(&kvs);
  }
  if (g->maybe) {
    static const int64_t again[] = {5000, 15000, 60000};
    if (g->maybe_n < 3)
      g->maybe_at = dlock__now_ms() + again[g->maybe_n++];
    else
      g->maybe = 0;
  }
  sweep_end(g, r);
  dlock__mu_unlock(&e->mu);
}

/* Sends gate g's background request (e->mu held), body b to path, which
 * done ends; g->sweep is the request while it runs. built = 0: the body
 * could not be made and nothing is sent. */
static void bg_send(dlock__etcd *e, dlock__etcd_gate *g, const char *path,
                    const dlock__sb *b, int built, dlock__etcd_done_fn *done) {
  dlock__etcd_req *r = dlock__calloc(1, sizeof *r);
  if (r && built &&
      dlock__etcd_req_init(r, e, path, b->p, b->len, DLOCK__ETCD_ONEROUND) ==
          0) {
    r->on_done = done;
    r->arg = g;
    g->sweep = r;
    if (dlock__etcd_req_start(r, e->lm) != 0)
      sweep_end(g, r);
  } else if (r) {
    dlock__etcd_req_free(r);
    free(r);
  }
}

static void maybe_tick(dlock__etcd *e, dlock__etcd_gate *g, int64_t now,
                       int64_t *next) {
  if (!g->maybe || g->busy || g->owner || g->sweep || g->rev)
    return;
  if (now < g->maybe_at) {
    if (g->maybe_at < *next)
      *next = g->maybe_at;
    return;
  }
  dlock__sb k, b;
  dlock__sb_init(&k);
  dlock__sb_init(&b);
  dlock__etcd_key(e, &k, g->name, g->key_lease);
  dlock__sb_adds(&b, "{\"key\":\"");
  dlock__etcd_b64(&b, k.p, k.len);
  dlock__sb_adds(&b, "\",\"keys_only\":true}");
  bg_send(e, g, "/v3/kv/range", &b, !k.oom && !b.oom, maybe_done);
  dlock__sb_free(&k);
  dlock__sb_free(&b);
}

/* Deletes gate g's stale key (e->mu held): a key of no hold, no call. */
static void sweep_tick(dlock__etcd *e, dlock__etcd_gate *g) {
  if (g->held || g->busy || g->owner || !g->rev || g->sweep)
    return;
  dlock__sb b;
  dlock__sb_init(&b);
  int built = dlock__etcd_delete_body(e, g, g->key_lease, g->rev, &b) == 0;
  g->sweep_rev = g->rev; /* read by sweep_done only, for this request */
  bg_send(e, g, "/v3/kv/txn", &b, built, sweep_done);
  dlock__sb_free(&b);
}

void dlock__etcd_gates_tick(dlock__etcd *e, int64_t now, int64_t *next) {
  for (dlock__etcd_gate **pp = &e->gates; *pp;) {
    dlock__etcd_gate *g = *pp;
    orphan_check(e, g);
    watch_tick(e, g, now, next);
    sweep_tick(e, g);
    maybe_tick(e, g, now, next);
    if (g->objects == 0 && !g->rev && !g->maybe && !g->watch && !g->sweep &&
        !g->busy && !g->owner && !g->queue) {
      *pp = g->next;
      gate_free(g);
      continue;
    }
    pp = &g->next;
  }
}

void dlock__etcd_gates_free(dlock__etcd *e) {
  while (e->gates) {
    dlock__etcd_gate *g = e->gates;
    e->gates = g->next;
    if (g->watch)
      watch_free(e, g->watch);
    if (g->sweep) {
      dlock__etcd_req_stop(g->sweep, e->lm);
      dlock__etcd_req_free(g->sweep);
      if (g->sweep->easy)
        curl_easy_cleanup(g->sweep->easy);
      free(g->sweep);
    }
    gate_free(g);
  }
}
