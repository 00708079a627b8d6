/*
 * etcd_lease.c -- the etcd store's session lease and the lease thread: the
 * etcd counterpart of watchdog.c's renewal and expiry threads, in one
 * thread that never blocks on a request.
 *
 * THE SESSION. One etcd lease per client (granted at dlock_client_new, or
 * at first need with lazy_connect), TTL = watchdog_timeout_ms in whole
 * seconds; every key the client makes for a watchdog hold or a wait lives
 * under it. Kept alive every TTL/3 (etcd's concurrency.Session does the
 * same); a keepalive that fails is tried again within min(1 s, TTL/12).
 *
 * THE DEADLINE (the engine's, engine.c (a)). A keepalive sent at t that
 * comes back with TTL > 0 proves the lease lives until at least t + TTL on
 * the server's clock: the server counts from when it RECEIVED it, after t,
 * and a new leader only extends leases (lessor.Promote). So every hold on
 * the session gets dlock__eng_renewed(h, t, TTL): its local deadline is
 * t + TTL - margin, and the holder is told (on_lock_lost) at that moment
 * if no later keepalive came back -- before anyone else can take the lock,
 * whatever the network or the cluster does. A keepalive answered without a
 * TTL says the lease is gone (expired while this process was paused, or
 * revoked): every hold on it is lost at once, and a new session is granted
 * for the next call.
 *
 * THE THREAD'S ROUND (one multi handle for everything it sends):
 *   1. a cancel (dlock_client_cancel_waits writes the client's pipe) wakes
 *      every blocked call of the client (their multis) and gate wait;
 *   2. the keepalive when due;
 *   3. the gates (etcd_lock.c): a watch on each holder's own key (a DELETE
 *      -- force unlock, revoke -- reports the loss at once), a delete for
 *      each key left behind (a wait that timed out without an answer, a
 *      hold that was lost or abandoned);
 *   4. the engine's expiry verdict for every hold (dlock__eng_expiry);
 *   5. poll until the earliest of: the next keepalive, the next deadline,
 *      a transfer's progress, the pipe -- at most a second.
 * Losses are reported with c->reg.mu only (callout.c's rule).
 *
 * WHAT IF THE CLUSTER LOSES ITS QUORUM. Keepalives fail (the members answer
 * 503 after their own timeout, or ours ends them); the holds' deadlines pass
 * and each is reported lost then. The server does not expire the lease
 * while it has no leader, so nobody else can take the lock meanwhile
 * either; when the quorum returns, the first keepalive renews the session,
 * and the keys of the lost holds are deleted by the gates' clean-up.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etcd/etcd_int.h"

int dlock__etcd_grant(dlock__etcd *e, int64_t ttl_s, int64_t *id,
                      int64_t *ttl_ms, int64_t *sent) {
  char body[64];
  snprintf(body, sizeof body, "{\"TTL\":%lld}", (long long)ttl_s);
  dlock__etcd_res res = {0};
  int rc =
      dlock__etcd_calls(e, "/v3/lease/grant", body, DLOCK__ETCD_RETRY, &res);
  if (rc)
    return rc;
  *id = dlock__etcd_int(res.json, "ID");
  int64_t ttl = dlock__etcd_int(res.json, "TTL");
  json_object_put(res.json);
  if (*id == 0 || ttl <= 0)
    return dlock__fail(DLOCK_EPROTO, "%s: lease grant answered no lease",
                       dlock__etcd_where(e, res.ep));
  *ttl_ms = ttl * 1000;
  *sent = res.sent;
  return 0;
}

int dlock__etcd_revoke(dlock__etcd *e, int64_t id) {
  char body[64];
  snprintf(body, sizeof body, "{\"ID\":\"%lld\"}", (long long)id);
  dlock__etcd_res res = {0};
  int rc =
      dlock__etcd_calls(e, "/v3/lease/revoke", body, DLOCK__ETCD_RETRY, &res);
  if (rc == DLOCK_EREDIS && res.code == 5)
    return dlock__fail(DLOCK_ELOST, "lease %llx not found (expired)",
                       (unsigned long long)id);
  if (rc == 0)
    json_object_put(res.json);
  return rc;
}

static int64_t period_of(int64_t ttl_ms) {
  return ttl_ms / 3 > 1 ? ttl_ms / 3 : 1;
}

int dlock__etcd_session_get(dlock__etcd *e, dlock__etcd_session *out) {
  dlock_client *c = e->c;
  dlock__mu_lock(&e->mu);
  for (int guard = 0;; guard++) {
    if (e->s.id) {
      *out = e->s;
      dlock__mu_unlock(&e->mu);
      return 0;
    }
    if (atomic_load(&c->closing)) {
      dlock__mu_unlock(&e->mu);
      return dlock__fail(DLOCK_ECLOSED, "client is closing");
    }
    if (!e->s.granting)
      break;
    struct timespec ts = dlock__abstime(CLOCK_MONOTONIC, 100);
    pthread_cond_timedwait(&e->lease_cv, &e->mu, &ts);
    if (guard > 100000)
      dlock__never("a session grant never ended");
  }
  e->s.granting = 1;
  dlock__mu_unlock(&e->mu);
  int64_t id = 0, ttl_ms = 0, sent = 0;
  int rc = dlock__etcd_grant(e, e->ttl_want_s, &id, &ttl_ms, &sent);
  dlock__mu_lock(&e->mu);
  e->s.granting = 0;
  if (rc == 0) {
    e->s.id = id;
    e->s.ttl_ms = ttl_ms;
    e->s.ok_sent = sent;
    e->s.ka_next = sent + period_of(ttl_ms);
    e->s.ka_sent = 0;
    e->s.fails = 0;
    e->s.info_done = 0;
    e->s.gen++;
    *out = e->s;
  }
  pthread_cond_broadcast(&e->lease_cv);
  dlock__mu_unlock(&e->mu);
  if (rc == 0)
    dlock__etcd_lease_poke(e);
  return rc;
}

void dlock__etcd_wait_register(dlock__etcd *e, dlock__etcd_waitreg *w) {
  dlock__mu_lock(&e->mu);
  w->next = e->waits;
  e->waits = w;
  dlock__mu_unlock(&e->mu);
}

void dlock__etcd_wait_unregister(dlock__etcd *e, dlock__etcd_waitreg *w) {
  dlock__mu_lock(&e->mu);
  for (dlock__etcd_waitreg **pp = &e->waits; *pp; pp = &(*pp)->next)
    if (*pp == w) {
      *pp = w->next;
      break;
    }
  dlock__mu_unlock(&e->mu);
}

/* Wakes every blocked call and gate wait (e->mu held). */
static void wake_all(dlock__etcd *e) {
  for (dlock__etcd_waitreg *w = e->waits; w; w = w->next)
    curl_multi_wakeup(w->m);
  for (dlock__etcd_gate *g = e->gates; g; g = g->next)
    pthread_cond_broadcast(&g->cv);
}

void dlock__etcd_lease_poke(dlock__etcd *e) {
  atomic_fetch_add(&e->poke, 1);
  if (e->lm)
    curl_multi_wakeup(e->lm);
}

/* ---- the thread's requests ------------------------------------------------
 */

/* The thread's own requests: the keepalive and the info key. */
typedef struct lease_state {
  dlock__etcd_req ka;   /* the keepalive in flight (ka.running) */
  int64_t ka_lease;     /* the lease it renews */
  dlock__etcd_req info; /* the client info key's put */
  int64_t info_lease;
  int info_busy, ka_busy;
  char host[256];
} lease_state;

/* Reports the losses noted under e->mu (e->lost) holding c->reg.mu only. */
static void report(dlock__etcd *e) {
  dlock__mu_lock(&e->mu);
  dlock__lost_note *lost = e->lost;
  e->lost = NULL;
  dlock__mu_unlock(&e->mu);
  if (!lost)
    return;
  dlock__mu_lock(&e->c->reg.mu);
  dlock__lost_report(e->c, lost);
  dlock__mu_unlock(&e->c->reg.mu);
}

static void ka_done(dlock__etcd_req *r) {
  dlock__etcd *e = r->e;
  lease_state *ls = r->arg;
  int64_t now = dlock__now_ms();
  json_object *res = dlock__etcd_get(r->res.json, "result");
  int64_t ttl = r->done && r->rc == 0 ? dlock__etcd_int(res, "TTL") : 0;
  dlock__mu_lock(&e->mu);
  ls->ka_busy = 0;
  e->s.ka_sent = 0;
  if (ls->ka_lease != e->s.id) {
    /* a keepalive of a lease replaced meanwhile: nothing to learn */
  } else if (r->done && r->rc == 0 && ttl > 0) {
    int64_t sent = r->res.sent;
    if (sent > e->s.ok_sent)
      e->s.ok_sent = sent;
    e->s.ttl_ms = ttl * 1000;
    e->s.fails = 0;
    e->s.ka_next = sent + period_of(e->s.ttl_ms);
    dlock__etcd_gates_renewed(e, sent, e->s.ttl_ms);
  } else if (r->done && r->rc == 0) {
    /* answered without a TTL: the lease is gone (expired, revoked) */
    dlock__log(&e->c->cfg, DLOCK_LOG_WARN, NULL, "session_lost",
               "the session lease %llx is gone (expired or revoked): every "
               "hold on it is lost; a new one is granted at the next call",
               (unsigned long long)e->s.id);
    dlock__etcd_gates_session_lost(e, e->s.gen, &e->lost);
    e->s.id = 0;
    wake_all(e);
  } else {
    int64_t p = period_of(e->s.ttl_ms) / 4;
    e->s.fails++;
    e->s.ka_next = now + (p < 1000 ? (p > 1 ? p : 1) : 1000);
    dlock__stat_add(&e->c->stats, DLOCK__ST_RENEWALS_FAILED, 1);
    dlock__log(&e->c->cfg, DLOCK_LOG_WARN, NULL, "renew_failed",
               "session keepalive failed (%s); the lease runs %lld ms more",
               r->why, (long long)(e->s.ok_sent + e->s.ttl_ms - now));
  }
  dlock__mu_unlock(&e->mu);
  if (r->res.json)
    json_object_put(r->res.json);
  r->res.json = NULL;
}

/* Starts the keepalive when due (e->mu held). */
static void ka_tick(dlock__etcd *e, lease_state *ls, int64_t now,
                    int64_t *next) {
  if (!e->s.id || ls->ka_busy)
    return;
  if (now < e->s.ka_next) {
    if (e->s.ka_next < *next)
      *next = e->s.ka_next;
    return;
  }
  char body[64];
  snprintf(body, sizeof body, "{\"ID\":\"%lld\"}", (long long)e->s.id);
  dlock__etcd_req_free(&ls->ka);
  CURL *easy = ls->ka.easy;
  memset(&ls->ka, 0, sizeof ls->ka);
  ls->ka.easy = easy;
  if (dlock__etcd_req_init(&ls->ka, e, "/v3/lease/keepalive", body,
                           strlen(body), DLOCK__ETCD_ONEROUND) != 0)
    return;
  ls->ka.on_done = ka_done;
  ls->ka.arg = ls;
  ls->ka_lease = e->s.id;
  /* a keepalive answered later than half a period is of no use */
  int64_t p = period_of(e->s.ttl_ms);
  if (ls->ka.timeout_ms > p)
    ls->ka.timeout_ms = (int)(p > 100 ? p : 100);
  if (dlock__etcd_req_start(&ls->ka, e->lm) == 0) {
    ls->ka_busy = 1;
    e->s.ka_sent = now;
    dlock__stat_add(&e->c->stats, DLOCK__ST_RENEWALS_SENT, 1);
  }
}

static void info_done(dlock__etcd_req *r) {
  dlock__etcd *e = r->e;
  lease_state *ls = r->arg;
  dlock__mu_lock(&e->mu);
  ls->info_busy = 0;
  if (r->done && r->rc == 0 && ls->info_lease == e->s.id)
    e->s.info_done = 1;
  else if (r->done && ls->info_lease == e->s.id)
    e->s.info_done = 2; /* tried: not again for this session */
  dlock__mu_unlock(&e->mu);
}

/* The client info key, once per session (e->mu held): who this client is,
 * under the session lease -- it goes with the client. */
static void info_tick(dlock__etcd *e, lease_state *ls) {
  if (!e->s.id || e->s.info_done || ls->info_busy)
    return;
  dlock_client *c = e->c;
  char val[700];
  snprintf(val, sizeof val, "host=%s\npid=%ld\nprogram=%s\nstarted=%lld",
           ls->host, (long)getpid(), program_invocation_short_name,
           (long long)c->started_ms);
  dlock__sb k, b;
  dlock__sb_init(&k);
  dlock__sb_init(&b);
  dlock__sb_add(&k, e->prefix, e->prefix_len);
  dlock__sb_adds(&k, "dlock_client:{");
  dlock__sb_adds(&k, c->id);
  dlock__sb_adds(&k, "}");
  dlock__sb_adds(&b, "{\"key\":\"");
  dlock__etcd_b64(&b, k.p, k.len);
  dlock__sb_adds(&b, "\",\"value\":\"");
  dlock__etcd_b64(&b, val, strlen(val));
  dlock__sb_adds(&b, "\",\"lease\":");
  dlock__etcd_jint(&b, e->s.id);
  dlock__sb_adds(&b, "}");
  dlock__etcd_req_free(&ls->info);
  CURL *easy = ls->info.easy;
  memset(&ls->info, 0, sizeof ls->info);
  ls->info.easy = easy;
  if (!k.oom && !b.oom &&
      dlock__etcd_req_init(&ls->info, e, "/v3/kv/put", b.p, b.len,
                           DLOCK__ETCD_ONEROUND) == 0) {
    ls->info.on_done = info_done;
    ls->info.arg = ls;
    ls->info_lease = e->s.id;
    if (dlock__etcd_req_start(&ls->info, e->lm) == 0)
      ls->info_busy = 1;
  }
  dlock__sb_free(&k);
  dlock__sb_free(&b);
}

/* A cancel since the last look wakes every blocked call (e->mu held). */
static void cancel_tick(dlock__etcd *e) {
  unsigned g = atomic_load(&e->c->cancel_gen);
  if (g != e->cancel_seen || atomic_load(&e->c->closing)) {
    e->cancel_seen = g;
    wake_all(e);
  }
}

/* One round of the thread (see the file's comment). Returns the time of
 * the next look. */
static int64_t round_once(dlock__etcd *e, lease_state *ls) {
  int64_t now = dlock__now_ms();
  int64_t next = now + 1000;
  dlock__mu_lock(&e->mu);
  cancel_tick(e);
  ka_tick(e, ls, now, &next);
  info_tick(e, ls);
  dlock__etcd_gates_tick(e, now, &next);
  dlock__etcd_gates_expiry(e, now, &next, &e->lost);
  dlock__etcd_permits_tick(e, now, &next, &e->lost);
  dlock__mu_unlock(&e->mu);
  report(e);
  int running = 0;
  curl_multi_perform(e->lm, &running);
  dlock__etcd_multi_reap(e->lm);
  report(e);
  return next;
}

static void *lease_main(void *arg) {
  dlock__etcd *e = arg;
  lease_state *ls = dlock__calloc(1, sizeof *ls);
  if (!ls)
    return NULL;
  if (gethostname(ls->host, sizeof ls->host - 1) != 0)
    snprintf(ls->host, sizeof ls->host, "?");
  int fd = e->c->ps.pipe[0];
  while (!atomic_load(&e->stop)) {
    unsigned poked = atomic_load(&e->poke);
    int64_t next = round_once(e, ls);
    if (atomic_load(&e->poke) != poked)
      continue;
    int64_t wait = next - dlock__now_ms();
    atomic_store(&e->wake_at, dlock__now_ms() + (wait < 1000 ? wait : 1000));
    if (atomic_load(&e->poke) != poked)
      continue; /* a poke came as it set wake_at */
    struct curl_waitfd wfd = {fd, CURL_WAIT_POLLIN, 0};
    curl_multi_poll(e->lm, fd >= 0 ? &wfd : NULL, fd >= 0 ? 1 : 0,
                    wait > 0 ? (int)(wait < 1000 ? wait : 1000) : 0, NULL);
    if (fd >= 0 && (wfd.revents & CURL_WAIT_POLLIN)) {
      char buf[64];
      while (read(fd, buf, sizeof buf) > 0) {
      }
    }
  }
  dlock__mu_lock(&e->mu);
  dlock__etcd_req_stop(&ls->ka, e->lm);
  dlock__etcd_req_stop(&ls->info, e->lm);
  dlock__mu_unlock(&e->mu);
  dlock__etcd_req_free(&ls->ka);
  dlock__etcd_req_free(&ls->info);
  if (ls->ka.easy)
    curl_easy_cleanup(ls->ka.easy);
  if (ls->info.easy)
    curl_easy_cleanup(ls->info.easy);
  report(e);
  free(ls);
  return NULL;
}

int dlock__etcd_lease_start(dlock__etcd *e) {
  if (!(e->lm = curl_multi_init()))
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  if (dlock__thread_start(&e->thread, lease_main, e) != 0) {
    curl_multi_cleanup(e->lm);
    e->lm = NULL;
    return dlock__fail(DLOCK_ENOMEM, "cannot start the etcd lease thread");
  }
  e->started = 1;
  return 0;
}

void dlock__etcd_lease_stop(dlock__etcd *e) {
  if (!e->started)
    return;
  atomic_store(&e->stop, 1);
  curl_multi_wakeup(e->lm);
  pthread_join(e->thread, NULL);
  e->started = 0;
}
