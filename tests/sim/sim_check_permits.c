/*
 * sim_check_permits.c -- the expirable permits' invariants (sim_permits.c),
 * checked after every step with the others (sim_check.c):
 *   5. counts exact: the count on the server plus the members of its
 *      timeout set are the capacity, always -- whatever copies ran late or
 *      twice (a permit moves between them, never appears or vanishes);
 *   6. the permits held by threads whose local deadline has not passed
 *      never exceed the capacity;
 *   7. every such permit is in the set with an expiry no earlier than its
 *      local deadline (nobody can reclaim it while its holder may work);
 *   7b. (--permit-lib-deadline) the same for the permits object's own
 *      local deadline of each permit it renews and nobody is releasing: on
 *      it the library reports a loss (on_lock_lost) no later than anyone
 *      can take the permit (docs/permits.md);
 *   8. a permit is never reported acquired when its answer came at or
 *      after its send + lease (issue 38 item 5: the lease counts from the
 *      send);
 *   9. a permit whose release answered "released" never comes back, unless
 *      an acquire copy of that id ran after the release was sent (a late
 *      copy re-takes it: counted, not a violation -- it lasts until its
 *      lease ends, held by nobody).
 */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define SETKEY "{" SIM_PERM_NAME "}:timeout"

static long long probe_int(sim_world *w, const char *cmd, const char *key,
                           const char *member, int *found) {
  const char *argv[4] = {cmd, key, member, NULL};
  sim_rep r;
  sim_probe(w, &r, argv);
  *found = r.type == RM_REPLY_STRING || r.type == RM_REPLY_INTEGER;
  if (r.type == RM_REPLY_STRING)
    return atoll(r.str);
  return r.type == RM_REPLY_INTEGER ? r.integer : 0;
}

static int check_holder(sim_world *w, const sim_client *cl,
                        const sim_actor *a) {
  char msg[300];
  if (a->pm.held && a->pm.late >= 0) {
    snprintf(msg, sizeof msg,
             "c%d.p%d's permit %.8s reported acquired %lld ms after its send "
             "+ lease of %lld ms: it may already have been reclaimed",
             a->client, a->idx - SIM_PACTOR, a->pm.id, (long long)a->pm.late,
             (long long)a->pm.lease);
    return sim_fail(w, msg, a, NULL);
  }
  if (w->holders_only || !sim_pobj_valid(cl, a, w->now))
    return 0;
  int found = 0;
  long long score = probe_int(w, "ZSCORE", SETKEY, a->pm.id, &found);
  int64_t until = sim_pobj_until(cl, a);
  if (found && score >= until)
    return 0;
  snprintf(msg, sizeof msg,
           "c%d.p%d holds permit %.8s (local deadline in %lld ms) but the "
           "server %s",
           a->client, a->idx - SIM_PACTOR, a->pm.id,
           (long long)(until - w->now),
           found ? "reclaims it sooner" : "has no such permit");
  if (found)
    snprintf(msg + strlen(msg), sizeof msg - strlen(msg), ": in %lld ms",
             score - (long long)w->now);
  return sim_fail(w, msg, a, NULL);
}

/* 7b: the object's deadlines (what on_lock_lost is told by). */
static int check_object(sim_world *w, const sim_client *cl) {
  const sim_pobj *o = &cl->po;
  for (int i = 0; i < o->nwd; i++) {
    int ai = o->wd[i].actor - SIM_PACTOR;
    const sim_actor *a = ai >= 0 && ai < cl->npactors ? &cl->pactors[ai] : NULL;
    if (o->wd[i].releasing || o->wd[i].valid_until <= w->now ||
        (a && a->pm.updating) || (a && a->pm.cap_at >= 0))
      continue; /* an update in flight (its answer decides), or the
                   reported late copy's move back (counted) */
    int found = 0;
    long long score = probe_int(w, "ZSCORE", SETKEY, o->wd[i].id, &found);
    if (found && score >= o->wd[i].valid_until)
      continue;
    char msg[300];
    snprintf(msg, sizeof msg,
             "c%d's permits object renews %.8s (its local deadline in %lld "
             "ms, no loss reported) but the server %s %lld ms",
             (int)(cl - w->clients), o->wd[i].id,
             (long long)(o->wd[i].valid_until - w->now),
             found ? "reclaims it in" : "has it not; was it for",
             found ? score - (long long)w->now : 0LL);
    return sim_fail(w, msg, a, NULL);
  }
  return 0;
}

static int check_gone(sim_world *w, const sim_actor *a) {
  if (!w->delivered || !a->pm.gone[0] || !a->pm.gone_ok || a->pm.gone_ran)
    return 0;
  int found = 0;
  probe_int(w, "ZSCORE", SETKEY, a->pm.gone, &found);
  if (!found)
    return 0;
  char msg[200];
  snprintf(msg, sizeof msg,
           "c%d.p%d's permit %.8s is back on the server after its release "
           "answered released, with no acquire copy of it run since",
           a->client, a->idx - SIM_PACTOR, a->pm.gone);
  return sim_fail(w, msg, a, NULL);
}

/* 5: only a script moves a permit, so after a copy ran on the server. */
static int check_counts(sim_world *w) {
  int found = 0;
  long long n = probe_int(w, "GET", SIM_PERM_NAME, NULL, &found);
  long long taken = probe_int(w, "ZCARD", SETKEY, NULL, &found);
  if (n + taken == SIM_PERM_CAP)
    return 0;
  char msg[240];
  snprintf(msg, sizeof msg,
           "permits %s: %lld available + %lld in the set, not %d",
           SIM_PERM_NAME, n, taken, SIM_PERM_CAP);
  return sim_fail(w, msg, NULL, NULL);
}

int sim_check_permits(sim_world *w) {
  int any = 0;
  long long held = 0;
  const sim_actor *last = NULL, *prev = NULL;
  for (int c = 0; c < w->nclients; c++) {
    const sim_client *cl = &w->clients[c];
    if (w->permit_lib_deadline && !w->holders_only && check_object(w, cl))
      return 1;
    for (int i = 0; i < cl->npactors; i++) {
      const sim_actor *a = &cl->pactors[i];
      any = 1;
      if (check_holder(w, cl, a) || check_gone(w, a))
        return 1;
      if (sim_pobj_valid(cl, a, w->now)) {
        held++;
        prev = last;
        last = a;
      }
    }
  }
  if (any && w->delivered && check_counts(w))
    return 1;
  if (held <= SIM_PERM_CAP)
    return 0;
  char msg[240];
  snprintf(msg, sizeof msg,
           "permits %s over capacity: %lld permits held within their local "
           "deadlines, %d in all",
           SIM_PERM_NAME, held, SIM_PERM_CAP);
  return sim_fail(w, msg, last, prev);
}
