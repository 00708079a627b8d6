/*
 * sim_check.c -- the invariants, checked after every step:
 *   1. at most one holder of the mutex among the actors inside a hold
 *      whose local deadline has not passed (dlock__eng_valid: the
 *      engine's own view);
 *   2. the read-write lock: readers XOR one writer, the same way;
 *   3. every such holder's local deadline is no later than the key's
 *      expiry on the server, and its field is there: the mutex hash; the
 *      rwlock hash and, for a read hold, the longest of its
 *      {name}:<field>:rwlock_timeout:<n> keys (another reader's unlock
 *      deletes the lock when no timeout key lives);
 *   4. a released hold never comes back: after a final release answered
 *      "released", the thread's field stays gone until an acquire copy of
 *      that thread runs again;
 *   5-9. the expirable permits' (sim_check_permits.c);
 *   10. the fair lock (its threads: 1, 3, 4 as the mutex's) loses no
 *      wake-up: free, with a live waiter queued, it is taken or handed on
 *      within SIM_FAIR_BOUND.
 * A violation prints the seed, what broke and the trace of the last events.
 */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* The absolute expiry of key (INT64_MAX: no TTL; -1: no key). */
static int64_t expiry(sim_world *w, const char *key) {
  const char *argv[3] = {"PTTL", key, NULL};
  sim_rep r;
  sim_probe(w, &r, argv);
  if (r.integer == -2)
    return -1;
  if (r.integer == -1)
    return INT64_MAX;
  return w->now + r.integer;
}

static long long hget(sim_world *w, const char *key, const char *field) {
  const char *argv[4] = {"HGET", key, field, NULL};
  sim_rep r;
  sim_probe(w, &r, argv);
  return r.type == RM_REPLY_STRING ? atoll(r.str) : 0;
}

/* The violation, and the story of the actors it names (a, b: NULL or
 * the actors; their client's watchdog and permits renewer too). */
int sim_fail(sim_world *w, const char *what, const sim_actor *a,
             const sim_actor *b) {
  printf("VIOLATION (seed %llu, step %llu, %.3f s simulated): %s\n",
         (unsigned long long)w->seed, (unsigned long long)w->steps,
         (double)(w->now - w->t0) / 1000.0, what);
  char who[6][16], wb[12];
  const char *whos[6];
  int n = 0;
  for (int i = 0; i < 2; i++) {
    const sim_actor *x = i ? b : a;
    if (!x)
      continue;
    snprintf(who[n], sizeof who[n], "c%d.%s", x->client, sim_who(wb, x->idx));
    whos[n] = who[n];
    n++;
    snprintf(who[n], sizeof who[n], "c%d.%s", x->client,
             x->idx >= SIM_PACTOR && x->idx < SIM_FACTOR ? "pw" : "wd");
    whos[n] = who[n];
    n++;
  }
  if (n == 0) { /* nobody named: the counters' story */
    whos[n++] = "sem";
    whos[n++] = "permit";
    whos[n++] = ".pw";
  }
  printf("the story (the last events of the actors named, and of their "
         "clients' watchdogs):\n");
  sim_trace_story(w, stdout, whos, n, 40);
  printf("the last events of all:\n");
  sim_trace_dump(w, stdout);
  printf("replay: make sim SEED=%llu\n", (unsigned long long)w->seed);
  w->violation = 1;
  return 1;
}

static int fail(sim_world *w, const char *what, const sim_actor *a,
                const sim_actor *b) {
  return sim_fail(w, what, a, b);
}

static int holder(const sim_actor *a, int k, int64_t now) {
  return a->held[k] > 0 && dlock__eng_valid(&a->rec[k], now);
}

/* 3: the holder's field and the key's expiry. */
static int check_key(sim_world *w, const sim_actor *a, int k) {
  char msg[400], f[SIM_STR];
  const char *name = sim_lock_name(k);
  snprintf(f, sizeof f, "%s%s", a->field, k == K_WRITE ? ":write" : "");
  int64_t until = a->rec[k].valid_until;
  long long n = hget(w, name, f);
  int64_t ex = expiry(w, name);
  if (n <= 0 || ex < until - 1) {
    snprintf(msg, sizeof msg,
             "c%d.t%d holds %s (local deadline in %lld ms) but the server "
             "has count %lld, key expiry in %lld ms",
             a->client, a->idx, sim_kind_name[k], (long long)(until - w->now),
             n, ex < 0 ? -1LL : (long long)(ex - w->now));
    return fail(w, msg, a, NULL);
  }
  if (k != K_READ)
    return 0;
  int64_t best = -1;
  for (long long i = 1; i <= n && i <= 64; i++) {
    char tk[200];
    sim_rw_timeout_prefix(name, a->field, tk, sizeof tk);
    snprintf(tk + strlen(tk), sizeof tk - strlen(tk), ":%lld", i);
    int64_t e = expiry(w, tk);
    if (e > best)
      best = e;
  }
  if (best < until - 1) {
    snprintf(msg, sizeof msg,
             "c%d.t%d holds read (local deadline in %lld ms) but its "
             "longest rwlock_timeout key expires in %lld ms: another "
             "reader's unlock may delete the lock under it",
             a->client, a->idx, (long long)(until - w->now),
             best < 0 ? -1LL : (long long)(best - w->now));
    return fail(w, msg, a, NULL);
  }
  return 0;
}

/* 4: a released hold never comes back. */
static int check_gone(sim_world *w, const sim_actor *a, int k) {
  if (a->held[k] || a->acquiring || !a->rel_ok[k] || a->acq_ran[k])
    return 0;
  char f[SIM_STR], msg[300];
  snprintf(f, sizeof f, "%s%s", a->field, k == K_WRITE ? ":write" : "");
  if (hget(w, sim_lock_name(k), f) <= 0)
    return 0;
  snprintf(msg, sizeof msg,
           "c%d.t%d's %s hold came back on the server after its release "
           "answered released, with no acquire of it run since",
           a->client, a->idx, sim_kind_name[k]);
  return fail(w, msg, a, NULL);
}

/* The semaphore: the permits held plus the server's never exceed it. */
static int check_sem(sim_world *w) {
  const char *argv[3] = {"GET", SIM_SEM_NAME, NULL};
  sim_rep r;
  sim_probe(w, &r, argv);
  long long free_now = r.type == RM_REPLY_STRING ? atoll(r.str) : -1;
  long long held = 0;
  const sim_actor *last = NULL, *prev = NULL;
  for (int c = 0; c < w->nclients; c++)
    for (int i = 0; i < w->clients[c].nactors; i++)
      if (w->clients[c].actors[i].held[K_SEM] > 0) {
        held += w->clients[c].actors[i].held[K_SEM];
        prev = last;
        last = &w->clients[c].actors[i];
      }
  if (free_now >= 0 && held + free_now <= SIM_SEM_PERMITS)
    return 0;
  char msg[200];
  snprintf(msg, sizeof msg,
           "semaphore %s over capacity: %lld permits held, %lld free on the "
           "server, %d in all",
           SIM_SEM_NAME, held, free_now, SIM_SEM_PERMITS);
  return fail(w, msg, last, prev);
}

/* The holders' slots: one mutex, one fair lock, one writer, readers. */
typedef struct slots {
  const sim_actor *mx, *fr, *wr, *rd;
} slots;

/* 1-4 for one thread's holds. */
static int check_actor(sim_world *w, const sim_actor *a, slots *s) {
  char msg[300];
  for (int k = 0; k < K_COUNT; k++) {
    if (k == K_SEM)
      continue;
    if (check_gone(w, a, k))
      return 1;
    if (!holder(a, k, w->now))
      continue;
    if (!w->holders_only && check_key(w, a, k))
      return 1;
    const sim_actor **slot = k == K_MUTEX   ? &s->mx
                             : k == K_FAIR  ? &s->fr
                             : k == K_WRITE ? &s->wr
                                            : &s->rd;
    const sim_actor *other = *slot;
    if (k == K_WRITE && !other && s->rd && s->rd != a)
      other = s->rd;
    if (k == K_READ && s->wr && s->wr != a)
      other = s->wr;
    if (other && (k != K_READ || other == s->wr)) {
      snprintf(
          msg, sizeof msg, "two holders: c%d.%s and c%d.%s both hold %s (%s)",
          other->client, sim_who((char[12]){0}, other->idx), a->client,
          sim_who((char[12]){0}, a->idx), sim_lock_name(k), sim_kind_name[k]);
      return fail(w, msg, other, a);
    }
    *slot = a;
  }
  return 0;
}

/* No lost wake-up: a free fair lock with a live waiter in its queue (its
 * client running, its wait going on, its field in the server's list) is
 * taken or handed on within SIM_FAIR_BOUND. */
/* A fair thread whose wait is going on, queued, its client running. */
static int waiting(const sim_world *w, const sim_client *cl,
                   const sim_actor *a) {
  return a->acquiring && !a->leaving && a->wt.queued &&
         cl->paused_until <= w->now;
}

/* The first live waiter in the fair lock's queue, when the lock is free. */
static const sim_actor *live_waiter(sim_world *w) {
  int any = 0;
  for (int c = 0; !any && c < w->nclients; c++)
    for (int i = 0; !any && i < w->clients[c].nfactors; i++)
      any = waiting(w, &w->clients[c], &w->clients[c].factors[i]);
  if (!any)
    return NULL;
  const char *ex[3] = {"EXISTS", SIM_FAIR_NAME, NULL};
  sim_rep r;
  sim_probe(w, &r, ex);
  for (int c = 0; r.integer == 0 && c < w->nclients; c++)
    for (int i = 0; i < w->clients[c].nfactors; i++) {
      const sim_actor *a = &w->clients[c].factors[i];
      if (!waiting(w, &w->clients[c], a))
        continue;
      const char *lp[4] = {"LPOS", "redisson_lock_queue:{" SIM_FAIR_NAME "}",
                           a->field, NULL};
      sim_rep p;
      sim_probe(w, &p, lp);
      if (p.type == RM_REPLY_INTEGER)
        return a;
    }
  return NULL;
}

/* The reported fair-queue issue: the head is a dead waiter (its client
 * paused, or its wait over) whose deadline is later than its own last
 * attempt + FAIR_LIVE_MS -- raised by the shrink's floor "never below now
 * + wait" when a waiter in front of it left or took the lock. Counted
 * once per stretch, a violation with --fair-strict. */
static int raised_dead_head(sim_world *w) {
  const char *li[4] = {"LINDEX", "redisson_lock_queue:{" SIM_FAIR_NAME "}", "0",
                       NULL};
  sim_rep h;
  sim_probe(w, &h, li);
  for (int c = 0; h.type == RM_REPLY_STRING && c < w->nclients; c++)
    for (int i = 0; i < w->clients[c].nfactors; i++) {
      const sim_actor *a = &w->clients[c].factors[i];
      if (strcmp(a->field, h.str) != 0 || waiting(w, &w->clients[c], a))
        continue;
      const char *zs[4] = {"ZSCORE",
                           "redisson_lock_timeout:{" SIM_FAIR_NAME "}",
                           a->field, NULL};
      sim_rep z;
      sim_probe(w, &z, zs);
      return z.type == RM_REPLY_STRING &&
             atoll(z.str) > a->sent + 5000; /* FAIR_LIVE_MS */
    }
  return 0;
}

static int check_fair_queue(sim_world *w) {
  const sim_actor *live = live_waiter(w);
  if (!live) {
    w->fair_stuck_since = -1;
    return 0;
  }
  if (w->fair_stuck_since < 0)
    w->fair_stuck_since = w->now;
  if (w->now - w->fair_stuck_since <= SIM_FAIR_BOUND ||
      w->fair_excused == w->fair_stuck_since)
    return 0;
  if (!w->fair_strict && raised_dead_head(w)) {
    w->fair_excused = w->fair_stuck_since;
    w->n_fair_raised++;
    sim_trace(w,
              "  ! fair lock free for %lld ms behind a dead head whose "
              "deadline a leaver's shrink raised (counted; --fair-strict)",
              (long long)(w->now - w->fair_stuck_since));
    return 0;
  }
  char msg[240];
  snprintf(msg, sizeof msg,
           "a lost wake-up: fair lock %s free for %lld ms with c%d.f%d "
           "live in its queue (bound %d ms)",
           SIM_FAIR_NAME, (long long)(w->now - w->fair_stuck_since),
           live->client, live->idx - SIM_FACTOR, SIM_FAIR_BOUND);
  return fail(w, msg, live, NULL);
}

int sim_check(sim_world *w) {
  if (check_sem(w) || sim_check_permits(w) || check_fair_queue(w))
    return 1;
  slots s = {NULL, NULL, NULL, NULL};
  for (int c = 0; c < w->nclients; c++) {
    const sim_client *cl = &w->clients[c];
    for (int i = 0; i < cl->nactors; i++)
      if (check_actor(w, &cl->actors[i], &s))
        return 1;
    for (int i = 0; i < cl->nfactors; i++)
      if (check_actor(w, &cl->factors[i], &s))
        return 1;
  }
  return 0;
}
