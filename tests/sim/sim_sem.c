/*
 * sim_sem.c -- the counting semaphore in the simulator: its calls built as
 * src/ builds them, and the driver's sequencing re-stated. It MIRRORS:
 *   src/kinds/sem.c:
 *                 sem_try_acquire (one attempt), sem_release
 *                 (dlock_sem_post), the name's channel redisson_sc:{name};
 *   src/kinds/counter.c:
 *                 dlock__chobj_count (KEYS: the permits, [the channel], the
 *                 request's once key dlock_once:{name}:<rid>, [the previous
 *                 change's once key]; ARGV: n, the once TTL[, publish]),
 *                 dlock__once_begin / dlock__once_end (an object remembers
 *                 its last change's once key, deleted by its next change --
 *                 not when the change may have been sent twice),
 *                 dlock__counter_wait (an attempt, then a re-check every
 *                 DLOCK__SEM_RECHECK_MS: the post messages are not modelled);
 *   src/config/settings.c:
 *                 dlock__once_ttl (the window and the key's TTL).
 * Each simulated thread has its own semaphore object. The invariant
 * (sim_check.c): the permits the threads hold plus the server's count
 * never exceed the capacity (a permit lost to an unknown outcome is fine).
 */
#include <string.h>

#include "sim.h"

#define SET(dst, ...) snprintf((dst), SIM_STR, __VA_ARGS__)

/* dlock__once_ttl with the simulator's config (connect_timeout_ms 10 s). */
static int64_t once_ttl(const sim_world *w) {
  int64_t send = 10000 + 2 * w->cfg.cto;
  int64_t win = (send + w->cfg.retry_pause) * w->cfg.tries + send;
  return win + send + 1000;
}

static void sem_call(sim_world *w, const sim_actor *a, int post, sim_call *c) {
  memset(c, 0, sizeof *c);
  c->script = post ? "sem_release" : "sem_try_acquire";
  SET(c->k[c->nk++], "%s", SIM_SEM_NAME);
  if (post)
    SET(c->k[c->nk++], "redisson_sc:{%s}", SIM_SEM_NAME);
  SET(c->k[c->nk++], "dlock_once:{%s}:%s", SIM_SEM_NAME, a->sem_rid);
  if (a->sem_prev[0])
    SET(c->k[c->nk++], "dlock_once:{%s}:%s", SIM_SEM_NAME, a->sem_prev);
  SET(c->a[c->na++], "1");
  SET(c->a[c->na++], "%lld", (long long)once_ttl(w));
  if (post)
    SET(c->a[c->na++], "PUBLISH");
}

/* dlock__chobj_count's end: 1 done, 0 nothing changed, or a code; the
 * once key is kept for the next change to delete when one copy was sent. */
static int counted(sim_actor *a, int rc, const sim_rep *r, int sends) {
  int v =
      rc ? rc : (r->type == RM_REPLY_INTEGER ? (int)r->integer : DLOCK_EREDIS);
  if (v == 1 && sends <= 1)
    memcpy(a->sem_prev, a->sem_rid, 33);
  return v;
}

static void trace(sim_world *w, const sim_actor *a, const char *what, int rc) {
  char wb[12];
  sim_trace(w, "c%d.%s sem %s rc=%d (holds %d)", a->client, sim_who(wb, a->idx),
            what, rc, a->held[K_SEM]);
}

static void post_done(sim_world *w, sim_actor *a, int rc, const sim_rep *r,
                      int sends) {
  rc = counted(a, rc, r, sends);
  trace(w, a, "posted", rc);
  sim_op_end(w, a);
}

static void post(sim_world *w, sim_actor *a) {
  a->held[K_SEM]--; /* the permit is given back as the call begins */
  sim_rid(w, a->sem_rid);
  sim_call c;
  sim_call_sem(w, a, 1, &c);
  a->sem_prev[0] = '\0'; /* dlock__once_begin takes it */
  sim_route(w, a, &c, post_done);
}

static void try_once(sim_world *w, sim_actor *a);

static void tried(sim_world *w, sim_actor *a, int rc, const sim_rep *r,
                  int sends) {
  rc = counted(a, rc, r, sends);
  if (rc == 1) {
    a->held[K_SEM]++;
    trace(w, a, "acquired", 0);
    sim_at_timer(w, a, w->now + a->hold_ms, post);
  } else if (rc == 0 && a->wait_ms != 0 &&
             w->now + 1 < a->started + a->wait_ms) {
    int64_t at = w->now + 1000; /* DLOCK__SEM_RECHECK_MS */
    if (at > a->started + a->wait_ms)
      at = a->started + a->wait_ms;
    sim_at_timer(w, a, at, try_once);
  } else {
    trace(w, a, "acquire failed", rc ? rc : DLOCK_EBUSY);
    sim_op_end(w, a);
  }
}

static void try_once(sim_world *w, sim_actor *a) {
  sim_rid(w, a->sem_rid);
  sim_call c;
  sim_call_sem(w, a, 0, &c);
  a->sem_prev[0] = '\0';
  sim_route(w, a, &c, tried);
}

void sim_call_sem(sim_world *w, const sim_actor *a, int post, sim_call *c) {
  sem_call(w, a, post, c);
}

void sim_sem_start(sim_world *w, sim_actor *a) {
  a->wait_ms = sim_chance(&w->rng, 300) ? 0 : sim_between(&w->rng, 50, 4000);
  a->started = w->now;
  try_once(w, a);
}
