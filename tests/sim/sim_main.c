/*
 * sim_main.c -- `dlock_sim`: runs seeds of the deterministic simulator
 * (sim.h) and reports steps per second and simulated hours per minute.
 *
 *   dlock_sim --seed N [--verbose]    replay one seed exactly (the trace
 *                                      of every event with --verbose)
 *   dlock_sim --minutes M              fresh seeds for M minutes of wall time
 *   dlock_sim --ci SECONDS --regress FILE
 *                                      the seeds of FILE, then seeds 1, 2, ...
 *                                      until SECONDS of wall time (ctest)
 *   --sim-seconds S                    simulated time per seed (default 600)
 *   --expect-violation                 exit 0 only if some seed fails (the
 *                                      proof that a put-back bug is found)
 *   --holders-only                     check invariants 1 and 2 only (does a
 *                                      broken deadline end in two holders?)
 *   --permit-actors N                  permit threads per client (default 2)
 *   --fair-actors N                    fair lock threads per client (2)
 *   --permit-lib-deadline              check the permits object's own
 *                                      deadlines against the server too
 *                                      (invariant 7b: finds a reported issue)
 *   --permit-lenient                   the two permit defects the simulator
 *                                      found (fixed since) counted, not
 *                                      violations (the default: violations;
 *                                      --permit-strict, kept, says so too)
 *   --fair-lenient                     the same for the fair queue's dead
 *                                      head kept by the shrink's floor
 * Exit: 0 clean, 1 a violation (seed and trace printed), 2 usage or a
 * model error. Wall time is read only to bound the run and to report.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

typedef struct run_opts {
  int64_t sim_ms;
  int clients, actors, pactors, factors, verbose, holders_only, lib_deadline,
      strict, fair_strict;
} run_opts;

typedef struct totals {
  uint64_t seeds, steps, sent, held, dropped, pauses, acquired, released;
  uint64_t late;
  uint64_t pm_acquired, pm_released, pm_late, pm_lost, pm_back, pm_earlier;
  uint64_t pm_lowered, fair_acquired, fair_released, fair_cancels;
  uint64_t fair_raised;
  double sim_s;
} totals;

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Pauses: every so often a client stops (GC, SIGSTOP) for a while. */
static void pause_next(sim_world *w) {
  if (w->p_pause == 0)
    return;
  sim_ev e;
  memset(&e, 0, sizeof e);
  e.kind = EV_PAUSE;
  e.client = -1;
  e.at = w->now + sim_between(&w->rng, 200, 200000 / (w->p_pause + 1));
  sim_push(w, &e);
}

static void do_pause(sim_world *w) {
  int c = (int)sim_between(&w->rng, 0, w->nclients - 1);
  int64_t d = sim_chance(&w->rng, 300) ? sim_between(&w->rng, 1000, 8000)
                                       : sim_between(&w->rng, 20, 1000);
  sim_client *cl = &w->clients[c];
  if (cl->paused_until < w->now + d)
    cl->paused_until = w->now + d;
  w->n_pauses++;
  sim_trace(w, "c%d PAUSED for %lld ms", c, (long long)d);
  pause_next(w);
}

static void dispatch(sim_world *w, const sim_ev *e) {
  w->delivered = e->kind == EV_DELIVER;
  if (e->kind == EV_DELIVER) {
    sim_deliver(w, e->req);
    return;
  }
  if (e->kind == EV_PAUSE) {
    do_pause(w);
    return;
  }
  sim_client *cl = &w->clients[e->client];
  if (cl->paused_until > w->now) { /* the client runs nothing meanwhile */
    sim_ev later = *e;
    later.at = cl->paused_until;
    sim_push(w, &later);
    return;
  }
  sim_actor *a = sim_actor_at(w, e->client, e->actor);
  if (a)
    sim_actor_event(w, a, e);
  else
    sim_wd_event(w, e->client, e);
}

/* One seed: 0 clean, 1 a violation. */
static int run_seed(uint64_t seed, const run_opts *o, totals *t) {
  sim_world w;
  sim_world_init(&w, seed, o->clients, o->actors, o->pactors, o->factors);
  w.verbose = o->verbose;
  w.holders_only = o->holders_only;
  w.permit_lib_deadline = o->lib_deadline;
  w.permit_strict = o->strict;
  w.fair_strict = o->fair_strict;
  for (int c = 0; c < w.nclients; c++)
    for (int i = 0; i < w.clients[c].nactors; i++)
      sim_actor_start(&w, &w.clients[c].actors[i]);
  for (int c = 0; c < w.nclients; c++)
    for (int i = 0; i < w.clients[c].npactors; i++)
      sim_perm_start(&w, &w.clients[c].pactors[i]);
  for (int c = 0; c < w.nclients; c++)
    for (int i = 0; i < w.clients[c].nfactors; i++)
      sim_actor_start(&w, &w.clients[c].factors[i]);
  pause_next(&w);
  int64_t end = w.t0 + o->sim_ms;
  sim_ev e;
  int64_t last_at = -1;
  uint64_t same = 0;
  while (!w.violation && sim_pop(&w, &e) && e.at <= end) {
    same = e.at == last_at ? same + 1 : 0;
    last_at = e.at;
    if (same > 100000) { /* every loop bounded: time must move */
      printf("SIM ERROR (seed %llu): 100000 steps without time moving\n",
             (unsigned long long)seed);
      sim_trace_dump(&w, stdout);
      w.violation = 1;
      break;
    }
    if (e.at < w.now) { /* an event in the past: a simulator error */
      printf("SIM ERROR (seed %llu): an event at %+lld ms in the past\n",
             (unsigned long long)seed, (long long)(e.at - w.now));
      sim_trace_dump(&w, stdout);
      w.violation = 1;
      break;
    }
    w.now = e.at;
    dispatch(&w, &e);
    w.steps++;
    if (!w.violation)
      sim_check(&w);
    else
      printf("VIOLATION (seed %llu, step %llu): the engine said a settled "
             "release is pending again\n",
             (unsigned long long)seed, (unsigned long long)w.steps);
  }
  t->seeds++;
  t->steps += w.steps;
  t->sim_s += (double)(w.now - w.t0) / 1000.0;
  t->sent += w.n_sent;
  t->held += w.n_held;
  t->dropped += w.n_dropped;
  t->pauses += w.n_pauses;
  t->acquired += w.n_acquired;
  t->released += w.n_released;
  t->late += w.n_lost_late;
  t->pm_acquired += w.n_pm_acquired;
  t->pm_released += w.n_pm_released;
  t->pm_late += w.n_pm_late;
  t->pm_lost += w.n_pm_lost;
  t->pm_back += w.n_pm_back;
  t->pm_earlier += w.n_pm_earlier;
  t->pm_lowered += w.n_pm_lowered;
  t->fair_acquired += w.n_fair_acquired;
  t->fair_released += w.n_fair_released;
  t->fair_cancels += w.n_fair_cancels;
  t->fair_raised += w.n_fair_raised;
  int v = w.violation;
  sim_world_free(&w);
  return v;
}

static void report(const totals *t, double secs) {
  if (secs <= 0)
    secs = 1e-9;
  printf("sim: %llu seeds, %llu steps in %.1f s wall: %.0f steps/s, %.2f "
         "simulated hours per wall minute\n",
         (unsigned long long)t->seeds, (unsigned long long)t->steps, secs,
         (double)t->steps / secs, t->sim_s / 3600.0 / (secs / 60.0));
  printf("sim: %llu requests (%llu held on the wire, %llu replies lost), "
         "%llu pauses, %llu holds taken, %llu released, %llu answered too "
         "late and given back\n",
         (unsigned long long)t->sent, (unsigned long long)t->held,
         (unsigned long long)t->dropped, (unsigned long long)t->pauses,
         (unsigned long long)t->acquired, (unsigned long long)t->released,
         (unsigned long long)t->late);
  printf("sim: permits: %llu taken, %llu released, %llu answered past their "
         "lease and given back, %llu lost (on_lock_lost), %llu re-taken by a "
         "late acquire copy after their release, %llu taken by an earlier "
         "attempt's late copy, %llu moved back by a late renewal copy "
         "(the reported issues)\n",
         (unsigned long long)t->pm_acquired, (unsigned long long)t->pm_released,
         (unsigned long long)t->pm_late, (unsigned long long)t->pm_lost,
         (unsigned long long)t->pm_back, (unsigned long long)t->pm_earlier,
         (unsigned long long)t->pm_lowered);
  printf("sim: fair lock: %llu holds taken, %llu released, %llu waits left "
         "the queue (fair_cancel), %llu times free past the bound behind a "
         "dead head whose deadline a leaver raised (the reported issue)\n",
         (unsigned long long)t->fair_acquired,
         (unsigned long long)t->fair_released,
         (unsigned long long)t->fair_cancels,
         (unsigned long long)t->fair_raised);
}

/* The seeds of a regression file: one number per line, '#' comments. */
static int run_file(const char *path, const run_opts *o, totals *t) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "sim: cannot open %s\n", path);
    return 2;
  }
  char line[256];
  int bad = 0;
  for (int n = 0; n < 100000 && fgets(line, sizeof line, f); n++) {
    char *p = line + strspn(line, " \t");
    if (*p == '#' || *p == '\n' || *p == '\0')
      continue;
    uint64_t seed = strtoull(p, NULL, 10);
    if (run_seed(seed, o, t)) {
      bad = 1;
      break;
    }
  }
  fclose(f);
  return bad;
}

int main(int argc, char **argv) {
  /* strict: the permit and fair defects the simulator found are fixed
   * (permits.c, fair.c): each is a violation again */
  run_opts o = {600000, 4, 2, 2, 2, 0, 0, 0, 1, 1};
  long long seed = -1;
  double minutes = 0, ci = 0;
  const char *regress = NULL;
  int expect = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--seed") == 0 && v)
      seed = atoll(argv[++i]);
    else if (strcmp(a, "--minutes") == 0 && v)
      minutes = atof(argv[++i]);
    else if (strcmp(a, "--ci") == 0 && v)
      ci = atof(argv[++i]);
    else if (strcmp(a, "--regress") == 0 && v)
      regress = argv[++i];
    else if (strcmp(a, "--sim-seconds") == 0 && v)
      o.sim_ms = (int64_t)(atof(argv[++i]) * 1000);
    else if (strcmp(a, "--clients") == 0 && v)
      o.clients = atoi(argv[++i]);
    else if (strcmp(a, "--actors") == 0 && v)
      o.actors = atoi(argv[++i]);
    else if (strcmp(a, "--permit-actors") == 0 && v)
      o.pactors = atoi(argv[++i]);
    else if (strcmp(a, "--fair-actors") == 0 && v)
      o.factors = atoi(argv[++i]);
    else if (strcmp(a, "--permit-lib-deadline") == 0)
      o.lib_deadline = 1;
    else if (strcmp(a, "--permit-strict") == 0)
      o.strict = 1;
    else if (strcmp(a, "--fair-strict") == 0)
      o.fair_strict = 1;
    else if (strcmp(a, "--permit-lenient") == 0)
      o.strict = 0;
    else if (strcmp(a, "--fair-lenient") == 0)
      o.fair_strict = 0;
    else if (strcmp(a, "--verbose") == 0)
      o.verbose = 1;
    else if (strcmp(a, "--holders-only") == 0)
      o.holders_only = 1;
    else if (strcmp(a, "--expect-violation") == 0)
      expect = 1;
    else {
      fprintf(
          stderr,
          "usage: %s [--seed N [--verbose]] [--minutes M] "
          "[--ci SECONDS --regress FILE] [--sim-seconds S] "
          "[--clients N] [--actors N] [--permit-actors N] [--fair-actors N] "
          "[--expect-violation]\n",
          argv[0]);
      return 2;
    }
  }
  if (o.clients < 1 || o.clients > 8 || o.actors < 1 || o.actors > 8 ||
      o.pactors < 0 || o.pactors > 6 || o.factors < 0 || o.factors > 8) {
    fprintf(stderr, "sim: 1..8 clients and actors, 0..6 permit actors, 0..8 "
                    "fair lock actors\n");
    return 2;
  }
  totals t;
  memset(&t, 0, sizeof t);
  double t0 = wall_s();
  int bad = 0;
  if (seed >= 0) {
    bad = run_seed((uint64_t)seed, &o, &t);
  } else {
    if (regress && (bad = run_file(regress, &o, &t)) == 2)
      return 2;
    double budget = ci > 0 ? ci : (minutes > 0 ? minutes * 60 : 60);
    uint64_t base = ci > 0 ? 1 : (uint64_t)time(NULL) * 1000;
    if (ci <= 0)
      printf("sim: fresh seeds from %llu\n", (unsigned long long)base);
    for (uint64_t s = base; !bad && wall_s() - t0 < budget; s++)
      bad = run_seed(s, &o, &t);
  }
  report(&t, wall_s() - t0);
  if (expect) {
    printf("sim: %s\n", bad ? "the violation expected was found"
                            : "NO violation found where one was expected");
    return bad ? 0 : 1;
  }
  return bad ? 1 : 0;
}
